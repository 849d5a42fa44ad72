// What the exact kernels' layouts share (exact_linear.cpp, exact_mlp.cpp): the common denominator of a batch's
// values and each value as an integer over it, refused with ExactRangeError when out of the kernels' range.
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <string>

#include "cuda/exact_linear.h"

namespace accumcheck::cuda::detail {

// Where a value sits ("weight of expert 1"), spelled out only for a message.
struct Where {
  const char* what;
  std::size_t index;
  std::string str() const { return std::string(what) + " " + std::to_string(index); }
};

// common = lcm(common, the denominator of v), or ExactRangeError (denominator) naming v when that passes 2^30.
void widen(mpz_class& common, const models::Rational& v, const Where& where);
// v times `common`, an integer below 2^31 in magnitude, or ExactRangeError (magnitude) naming v.
std::int64_t raw_of(const models::Rational& v, const mpz_class& common, const Where& where);

}  // namespace accumcheck::cuda::detail
