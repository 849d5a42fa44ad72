// InlineOrMpq: the storage Rational and FastRational share, and nothing of their arithmetic.
//
// A value is either two int64 words, num_ / den_ with den_ > 0 ("inline"), or an owned heap mpq_class when
// den_ == 0 ("promoted"). Which values go where, and canonical form, are the owning type's contract: both keep
// a value inline exactly when its lowest-terms numerator and denominator fit, so that inline values compare by
// their words. Here: construction, deep copies, moves that leave the source as an inline zero (valid, owning
// nothing), and release.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <gmpxx.h>

namespace accumcheck::models::detail {

// |x| as uint64: exact for INT64_MIN too, which has no int64 magnitude.
inline std::uint64_t magnitude(std::int64_t x) noexcept {
  return x < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
}

// True when a canonical q fits two int64 words (its denominator is then in [1, INT64_MAX]).
inline bool fits_inline(const mpq_class& q) noexcept {
  return mpz_fits_slong_p(q.get_num_mpz_t()) != 0 && mpz_fits_slong_p(q.get_den_mpz_t()) != 0;
}

class InlineOrMpq {
 protected:
  InlineOrMpq() noexcept : num_(0), den_(1) {}
  InlineOrMpq(std::int64_t num, std::int64_t den) noexcept : num_(num), den_(den) {}

  // Copies and moves of two inline values (nearly all of them) are a few instructions, inlined where they are
  // used; anything that touches a promoted value is out of line (cold), so that the compiler keeps the fast
  // path small enough to inline (it had made the moves and copies out-of-line calls: 4% of a small trial).
  InlineOrMpq(const InlineOrMpq& other) : den_(other.den_) {
    if (other.is_inline()) [[likely]] {
      num_ = other.num_;
    } else {
      big_ = copy_of(*other.big_);
    }
  }
  InlineOrMpq(InlineOrMpq&& other) noexcept { take(other); }
  InlineOrMpq& operator=(const InlineOrMpq& other) {
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

  // Holds the canonical q: inline when it fits, else promoted (taking q's limbs).
  void assign_canonical(mpq_class&& q) {
    if (fits_inline(q)) {
      if (!is_inline()) delete big_;
      num_ = mpz_get_si(q.get_num_mpz_t());
      den_ = mpz_get_si(q.get_den_mpz_t());
    } else if (!is_inline()) {
      *big_ = std::move(q);
    } else {
      big_ = new mpq_class(std::move(q));
      den_ = 0;
    }
  }

  // "n" or "n/d", as mpq_class::get_str writes a canonical value.
  std::string canonical_string() const {
    if (!is_inline()) return big_->get_str(10);
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
    mpq_class* big_;
  };
  std::int64_t den_;

 private:
  [[gnu::cold, gnu::noinline]] static mpq_class* copy_of(const mpq_class& q) { return new mpq_class(q); }
  [[gnu::cold, gnu::noinline]] static void release(mpq_class* q) noexcept { delete q; }
  [[gnu::cold, gnu::noinline]] InlineOrMpq& copy_assign_slow(const InlineOrMpq& other) {
    if (this == &other) return *this;
    if (other.is_inline()) {
      delete big_;  // this is promoted (else the fast path took it)
      num_ = other.num_;
      den_ = other.den_;
    } else if (!is_inline()) {
      *big_ = *other.big_;  // reuse our limbs
    } else {
      mpq_class* copy = new mpq_class(*other.big_);  // allocate before changing anything, for exception safety
      big_ = copy;
      den_ = 0;
    }
    return *this;
  }
  [[gnu::cold, gnu::noinline]] InlineOrMpq& move_assign_slow(InlineOrMpq& other) noexcept {
    if (this == &other) return *this;
    if (!is_inline()) delete big_;
    take(other);
    return *this;
  }
};

}  // namespace accumcheck::models::detail
