// InlineOrMpq: the storage Rational and FastRational share, and nothing of their arithmetic.
//
// A value is either two int64 words, num_ / den_ with den_ > 0 ("inline"), or a read-only heap PackedMpq, shared
// by reference count, when den_ == 0 ("promoted"). Which values go where, and canonical form, are the owning type's
// contract: both keep a value inline exactly when its lowest-terms numerator and denominator fit, so that inline
// values compare by their words. Here: construction, copies (a promoted value's block is shared, never copied),
// moves that leave the source as an inline zero (valid, owning nothing), and release.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include <gmpxx.h>

namespace accumcheck::models::detail {

// |x| as uint64: exact for INT64_MIN too, which has no int64 magnitude. Without a branch on the sign, which is
// random in the models' values (the branch the compiler made mispredicted 21% of the time at the peer's sizes).
inline std::uint64_t magnitude(std::int64_t x) noexcept {
  const auto sign = static_cast<std::uint64_t>(x >> 63);  // 0 or all ones
  return (static_cast<std::uint64_t>(x) ^ sign) - sign;
}

// True when a canonical q fits two int64 words (its denominator is then in [1, INT64_MAX]).
inline bool fits_inline(mpq_srcptr q) noexcept {
  return mpz_fits_slong_p(mpq_numref(q)) != 0 && mpz_fits_slong_p(mpq_denref(q)) != 0;
}

// A promoted value: one heap block holding an mpq's header and, after it, the numerator's limbs and then the
// denominator's. The header is made with mpz_roinit_n, so GMP reads it as any mpq; nothing ever writes through it
// (results are made in an mpq of their own and packed). Why: an mpq_class is three heap blocks (itself and two limb
// arrays) to create, copy and free, and a copy goes through two mpz_init_set; a packed value is one block, made
// with one allocation and a memcpy, freed with one free (promoted values' copies and frees were about a tenth of a
// default campaign's instructions).
// Since nothing writes a block after pack, copies share it: a copy adds a holder, the last release frees it (a
// promoted copy had been an allocation and a memcpy, about 4% of a default campaign's instructions). The count is
// atomic because nothing stops two threads from copying or releasing holders of one block at once (a const value
// read by several threads, or copies of one value handed to different threads), and a plain count would then lose
// a holder; a release by the only holder frees without a locked instruction, since no other thread can then be
// adding one.
class PackedMpq {
 public:
  PackedMpq(const PackedMpq&) = delete;
  PackedMpq& operator=(const PackedMpq&) = delete;

  // A packed copy of q, which must be canonical and nonzero (a promoted value never is zero: zero fits inline).
  static PackedMpq* pack(mpq_srcptr q) {
    const std::size_t nn = mpz_size(mpq_numref(q)), nd = mpz_size(mpq_denref(q));
    void* raw = ::operator new(sizeof(PackedMpq) + (nn + nd) * sizeof(mp_limb_t));
    auto* p = new (raw) PackedMpq;
    mp_limb_t* limbs = p->limbs();
    std::memcpy(limbs, mpz_limbs_read(mpq_numref(q)), nn * sizeof(mp_limb_t));
    std::memcpy(limbs + nn, mpz_limbs_read(mpq_denref(q)), nd * sizeof(mp_limb_t));
    const auto signed_nn = static_cast<mp_size_t>(nn);
    mpz_roinit_n(mpq_numref(p->q_), limbs, mpz_sgn(mpq_numref(q)) < 0 ? -signed_nn : signed_nn);
    mpz_roinit_n(mpq_denref(p->q_), limbs + nn, static_cast<mp_size_t>(nd));
    return p;
  }
  // One more holder of p's value.
  static PackedMpq* share(PackedMpq* p) noexcept {
    p->holders_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  // One holder fewer; the last frees the block. The header is plain data and the limbs are the block's own:
  // nothing to clear, one free. Acquire on the last release orders every holder's reads before the free.
  static void release(PackedMpq* p) noexcept {
    if (p->holders_.load(std::memory_order_acquire) == 1 || p->holders_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      p->~PackedMpq();
      ::operator delete(p);
    }
  }

  mpq_srcptr get() const noexcept { return q_; }

 private:
  PackedMpq() = default;
  mp_limb_t* limbs() noexcept { return reinterpret_cast<mp_limb_t*>(this + 1); }
  mpq_t q_;
  std::atomic<std::size_t> holders_{1};
};
static_assert(sizeof(PackedMpq) % alignof(mp_limb_t) == 0, "the limbs follow the header unpadded");

class InlineOrMpq {
 protected:
  InlineOrMpq() noexcept : num_(0), den_(1) {}
  InlineOrMpq(std::int64_t num, std::int64_t den) noexcept : num_(num), den_(den) {}

  // Copies and moves of two inline values (nearly all of them) are a few instructions, inlined where they are
  // used; anything that touches a promoted value is out of line (cold), so that the compiler keeps the fast
  // path small enough to inline (it had made the moves and copies out-of-line calls: 4% of a small trial).
  // A copy of a promoted value shares its block: it cannot throw.
  InlineOrMpq(const InlineOrMpq& other) noexcept : den_(other.den_) {
    if (other.is_inline()) [[likely]] {
      num_ = other.num_;
    } else {
      big_ = share(other.big_);
    }
  }
  InlineOrMpq(InlineOrMpq&& other) noexcept { take(other); }
  InlineOrMpq& operator=(const InlineOrMpq& other) noexcept {
    if (is_inline() && other.is_inline()) [[likely]] {
      num_ = other.num_;
      den_ = other.den_;
      return *this;
    }
    return copy_assign_slow(other);
  }
  InlineOrMpq& operator=(InlineOrMpq&& other) noexcept {
    if (is_inline() && other.is_inline()) [[likely]] {
      num_ = other.num_;
      den_ = other.den_;
      return *this;
    }
    return move_assign_slow(other);
  }
  ~InlineOrMpq() {
    if (!is_inline()) [[unlikely]] release(big_);
  }

  bool is_inline() const noexcept { return den_ != 0; }

  // Holds (a copy of) the canonical q: inline when it fits, else promoted.
  void assign_canonical(mpq_srcptr q) {
    if (fits_inline(q)) {
      if (!is_inline()) PackedMpq::release(big_);
      num_ = mpz_get_si(mpq_numref(q));
      den_ = mpz_get_si(mpq_denref(q));
    } else {
      PackedMpq* packed = PackedMpq::pack(q);  // allocate before changing anything, for exception safety
      if (!is_inline()) PackedMpq::release(big_);
      big_ = packed;
      den_ = 0;
    }
  }
  void assign_canonical(const mpq_class& q) { assign_canonical(q.get_mpq_t()); }

  // A promoted value's mpq, read only (this must be promoted).
  mpq_srcptr promoted() const noexcept { return big_->get(); }

  // Both words equal: then the values are (an inline value's words are its canonical parts; a promoted value's
  // are its shared block and the 0 that marks it). Words that differ mean different values unless both are
  // promoted, in different blocks. Compared as bytes, without a branch on which member of the union is live.
  bool same_words(const InlineOrMpq& other) const noexcept {
    static_assert(sizeof(InlineOrMpq) == 2 * sizeof(std::int64_t), "two words, no padding");
    return std::memcmp(this, &other, sizeof(InlineOrMpq)) == 0;
  }
  // The same for n values in a row (a tensor's storage): one memcmp, which reads no value's kind.
  static bool same_words(const InlineOrMpq* a, const InlineOrMpq* b, std::size_t n) noexcept {
    return n == 0 || std::memcmp(a, b, n * sizeof(InlineOrMpq)) == 0;
  }
  // Equal values, for Rational's and FastRational's operator== and FastRational::equals(const Rational&), which share
  // this storage and its canonical form. Equal words first: one test that is true for every equal inline pair and
  // every shared block, where testing each value's kind first branched on kinds that mix at random in a tensor after
  // an Adam step. A value that fits is never promoted, so an inline value whose words differ from the other's
  // differs from it; two promoted values in different blocks compare their mpqs.
  bool same_value(const InlineOrMpq& other) const noexcept {
    if (same_words(other)) return true;
    if (is_inline() || other.is_inline()) return false;
    return mpq_equal(promoted(), other.promoted()) != 0;
  }

  // "n" or "n/d", as mpq_class::get_str writes a canonical value.
  std::string canonical_string() const {
    if (!is_inline()) return mpq_class(big_->get()).get_str(10);
    if (den_ == 1) return std::to_string(num_);
    return std::to_string(num_) + "/" + std::to_string(den_);
  }

  // Takes other's value (this owns nothing yet) and leaves other an inline zero.
  void take(InlineOrMpq& other) noexcept {
    den_ = other.den_;
    if (other.is_inline()) {
      num_ = other.num_;
    } else {
      big_ = other.big_;
      other.num_ = 0;
      other.den_ = 1;
    }
  }

  union {
    std::int64_t num_;
    PackedMpq* big_;
  };
  std::int64_t den_;

 private:
  [[gnu::cold, gnu::noinline]] static PackedMpq* share(PackedMpq* q) noexcept { return PackedMpq::share(q); }
  [[gnu::cold, gnu::noinline]] static void release(PackedMpq* q) noexcept { PackedMpq::release(q); }
  [[gnu::cold, gnu::noinline]] InlineOrMpq& copy_assign_slow(const InlineOrMpq& other) noexcept {
    if (this == &other) return *this;
    if (other.is_inline()) {
      PackedMpq::release(big_);  // this is promoted (else the fast path took it)
      num_ = other.num_;
      den_ = other.den_;
    } else {
      PackedMpq* shared = PackedMpq::share(other.big_);  // before the release: the two may hold the same block
      if (!is_inline()) PackedMpq::release(big_);
      big_ = shared;
      den_ = 0;
    }
    return *this;
  }
  [[gnu::cold, gnu::noinline]] InlineOrMpq& move_assign_slow(InlineOrMpq& other) noexcept {
    if (this == &other) return *this;
    if (!is_inline()) PackedMpq::release(big_);
    take(other);
    return *this;
  }
};

}  // namespace accumcheck::models::detail
