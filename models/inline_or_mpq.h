// InlineOrMpq: the storage Rational and FastRational share, and nothing of their arithmetic.
//
// A value is either two int64 words, num_ / den_ with den_ > 0 ("inline"), or an owned heap mpq_class when
// den_ == 0 ("promoted"). Which values go where, and canonical form, are the owning type's contract: both keep
// a value inline exactly when its lowest-terms numerator and denominator fit, so that inline values compare by
// their words. Here: construction, deep copies, moves that leave the source as an inline zero (valid, owning
// nothing), and release.
#pragma once

#include <cstdint>

#include <gmpxx.h>

namespace accumcheck::models::detail {

class InlineOrMpq {
 protected:
  InlineOrMpq() noexcept : num_(0), den_(1) {}
  InlineOrMpq(std::int64_t num, std::int64_t den) noexcept : num_(num), den_(den) {}

  InlineOrMpq(const InlineOrMpq& other) : den_(other.den_) {
    if (other.is_inline()) {
      num_ = other.num_;
    } else {
      big_ = new mpq_class(*other.big_);
    }
  }
  InlineOrMpq(InlineOrMpq&& other) noexcept { take(other); }
  InlineOrMpq& operator=(const InlineOrMpq& other) {
    if (this == &other) return *this;
    if (other.is_inline()) {
      if (!is_inline()) delete big_;
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
  InlineOrMpq& operator=(InlineOrMpq&& other) noexcept {
    if (this == &other) return *this;
    if (!is_inline()) delete big_;
    take(other);
    return *this;
  }
  ~InlineOrMpq() {
    if (!is_inline()) delete big_;
  }

  bool is_inline() const noexcept { return den_ != 0; }

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
};

}  // namespace accumcheck::models::detail
