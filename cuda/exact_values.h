// What the kernels' layouts share (exact_linear.cpp, exact_mlp.cpp, float_linear.cpp): the checks of their arguments;
// for the exact ones, the common denominator of a batch's values and each value as an integer over it, refused with
// ExactRangeError when out of the kernels' range.
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cuda/exact_linear.h"

namespace accumcheck::cuda::detail {

// Where a value sits ("weight of expert 1"), spelled out only for a message.
struct Where {
  const char* what;
  std::size_t index;
  std::string str() const { return std::string(what) + " " + std::to_string(index); }
};

// What every layout checks first, naming `who` in the message (std::invalid_argument): the model kind, one group in
// [0, group_count) per sequence, group_count >= 1, and the parameters and sequences against the spec.
void validate_layout(const char* who, models::ModelKind kind, const models::ModelSpec& spec,
                     const models::Parameters<models::Rational>& params,
                     std::span<const models::Sequence<models::Rational>> sequences, std::span<const int> sequence_group,
                     int group_count);

// What every to_*_gradient checks first, naming `who` (std::invalid_argument): `sums` sums for a batch of `expected`,
// and one coefficient per group.
void check_sums(const char* who, std::size_t sums, std::size_t expected, std::size_t coefficients, int groups);

// The largest |raw| of `values`, as a double, for bounding a batch's intermediates; and what they must stay below
// (Int128 holds 2^127: the margin covers the doubles' rounding of the bounds).
double largest_magnitude(const std::vector<std::int64_t>& values);
inline constexpr double kSumsMax = 0x1p120;

// common = lcm(common, the denominator of v), or ExactRangeError (denominator) naming v when that passes 2^30.
void widen(mpz_class& common, const models::Rational& v, const Where& where);
// v times `common`, an integer below 2^31 in magnitude, or ExactRangeError (magnitude) naming v.
std::int64_t raw_of(const models::Rational& v, const mpz_class& common, const Where& where);

}  // namespace accumcheck::cuda::detail
