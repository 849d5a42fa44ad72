// FloatBound<F>: the exact value of a formula together with a rigorous upper bound on how far ANY IEEE-754
// round-to-nearest evaluation of the same formula, in float format F, can land from that value.
//
// Why: external targets (PyTorch loops, real DeepSpeed) compute in fp32 or fp64, and accumcheck compares their
// results with the exact full-batch oracle. A float result is accepted iff |actual - exact| <= bound. The bar is
// zero false positives: a correct target must never exceed the bound, whatever order it sums in. The bound must
// also be tight enough that a dropped or doubled micro-batch stands far outside it. run_oracle<FloatBound<F>>
// gives, for every output (gradients, grad norm, clip coefficient, parameters, moments), both at once.
//
// Method: forward error analysis (Higham, "Accuracy and Stability of Numerical Algorithms", ch. 2-4), carried
// along with the exact value. Each value holds
//   exact      a FastRational, bit for bit what run_oracle<FastRational> computes (the square root is
//              ScalarTraits<FastRational>::sqrt, the exact root floored to 2^-64);
//   error      a long double upper bound on |computed - exact|; 0 means every evaluation gives exactly `exact`;
//   a pending sum: values built only by + and - stay one sum of n terms, with M = sum(|term| + its error) and
//              the sum of the term errors. Its rounding is charged once, when the sum is closed (used by *, /,
//              sqrt, a comparison, or read out), as gamma_{n-1} M + (n-1) eta, which bounds every summation
//              order and every summation tree (each term takes part in at most n-1 additions);
//   poison     overflow past max finite, a division by an interval containing 0, a bound past 1/(n k_r u):
//              the bound is then unbounded (error_bound gives std::nullopt) and comparisons are undecided.
// Cost: about twice run_oracle<FastRational> on the fuzzer's scenarios (float_bound_test prints the measurement);
// the bound work is a few long double operations per operation, the exact work is FastRational's own.
// Rules (u = 2^-p, eta = 2^(emin-p), k_r = kRoundingAllowance, all in long double, every new bound times
// (1 + 2^-40) to absorb the bound arithmetic's own rounding and the magnitudes read through doubles):
//   input q        0 when q is representable in F, else k_r u |q| + eta;
//   sum of n       term errors + gamma_{n-1} M + (n-1) eta, gamma_k = k k_r u / (1 - k k_r u);
//   x * y          |x|E_y + |y|E_x + E_x E_y + max(D(x over y), D(y over x)), the rounding of the product as
//                  written or with one operand distributed over the other's terms:
//                  D(x over y) = k_r u R_x Y + gamma_{N_x - 1} (1 + k_r u) R_x Y + N_x eta, Y = |y| + E_y, where a
//                  certified pending sum has its n and M as N_x and R_x, anything else N = 1, R = |x| + E (so
//                  the plain rule k_r u (|x|+E_x)(|y|+E_y) + eta); by a pure power of two (certified, one term):
//                  |y|E_x + N_x eta, exact scaling;
//   x / y          poison if |y| - E_y <= 0; else (E_x + |x/y| E_y)/(|y| - E_y), plus D with N = N_x and
//                  R = |x/y| + that (M_x/(|y| - E_y) + that for a certified sum x); by an exact power of two y:
//                  E_x/|y| + N_x eta;
//   sqrt(x)        min(sqrt(E_x), E_x/(sqrt|x| + sqrt(max(|x|-E_x, 0)))) + k_r u sqrt(|x|+E_x) + eta + 2^-64.
//   round_update   E_x + 2^-64 when the exact oracle's truncation of Adam's update or of the clip coefficient
//                  to 2^-64 moved the value
//                  (the float evaluation computes the quotient unrounded), else E_x.
//   comparisons    decided by the exact values; when they differ by at most E_x + E_y > 0 a float evaluation
//                  may take either branch, so they throw AmbiguousComparison (a ReLU at its kink, a clip
//                  coefficient at 1: a real discontinuity, which no bound can cover).
//
// The rounding allowance k_r = 2: every operation is charged two roundings, not one. A correct target may
// compute the same formula in another algebraic form: a division as multiplication by a rounded reciprocal,
// clip_grad_norm_ as the norm of per-tensor norms, torch.optim's lerp/addcmul forms of the moment updates, a
// coefficient distributed over a sum or factored out of it, DDP's multiply-by-world-size then average. Each such
// rewrite costs at most one extra rounding per operation. It also covers double rounding: ScalarTraits<float>::
// from_rational (and PyTorch with a Python float) rounds to double first, then to float, and the 16-bit types
// compute in float and round back; u_F + u_double (1 + u_F) < 2 u_F.
//
// Exactness (error 0), and why it survives those rewrites: a value is certified exact by a dyadic certificate
// (g, B): every term, and every intermediate that reassociating, distributing or factoring its sums and product
// chains can create, is an integer multiple of 2^g of magnitude at most B. Leaves (inputs, constants, exact roots)
// have g = the exponent of their lowest set bit and B = |q|; a sum takes min g and sum B, a product g_x + g_y and
// B_x B_y. When B < 2^(g + p) every such intermediate is representable, so every evaluation is exact. For a pure
// product chain this is the classical argument: the significand bit length (of the odd part) of a sub-product of
// dyadics never exceeds that of the whole product, because bitlen(m n) >= bitlen(m) for integers m, n >= 1; the
// same holds here since B >= 2^g for every nonzero factor, so a sub-product's B_s < 2^(g_s + p) follows from the
// whole's. The exponent range is checked over the extremes of every sub-product (tracked beside (g, B)). Derived
// values keep kExactnessSpareBits bits free, so that a rewrite scaling an intermediate by a small integer and
// dividing it back (DDP's multiply by world size, then average) stays exact. A quotient by a non-power of two is
// never called exact (a target may multiply by the rounded reciprocal).
//
// Design notes (deviations from the first design, with the reason):
//   - Inputs are charged k_r u |q| + eta, not u |q| + eta: the float path rounds through double (see above), so a
//     single u can be exceeded by u_double |q|.
//   - Exactness uses the certificate above instead of "the exact product is representable": the plain rule calls
//     c (a + b) exact when a + b is, yet a target that distributes c over the sum rounds c a and c b. In fp32,
//     a = 1/2 + 2^-19, b = -3/8 - 2^-19, c = 65: 65 a + 65 b evaluates to 8.124998..., not 65/8. The same example
//     breaks two more plain rules, both fixed here: "a power-of-two factor scales exactly" (a + b = 1/8 is one,
//     its terms are not), and "charge k_r u |x||y|" for an inexact c times an exact sum with cancellation (the
//     distributed form rounds relative to |a| + |b|, not |a + b|); hence D(x over y) in the product rule.
//     A sum with a bound of its own needs no such care: its closing already charged gamma_{n-1} over the sum of
//     |terms|, 2 (n-1) u M, which covers the n u M that distributing a factor over it costs, for n >= 2.
//   - What "another algebraic form" covers, precisely: any order and tree of every sum; any association of every
//     product chain; a factor distributed over the terms of the sum it directly multiplies (or divides), or
//     factored out of such a sum; and the one-extra-rounding forms listed with k_r. Certified-exact values are
//     exact under every rewrite of these kinds at any depth. Bounds of inexact values cover distribution one level
//     deep, not a product of sums expanded into monomials or a factor pushed into a sum nested inside another
//     product: no framework computes a gradient that way, and charging for it would price every product of exact
//     sums as a long dot product (it cost 4x in tightness when tried).
//   - A division by an exact zero throws std::domain_error, as FastRational does: the exact formula itself is
//     undefined there, so there is no exact value to bound.
//   - sqrt assumes its argument's float evaluation is nonnegative (a sum of squares, or of nonnegative terms, as
//     in every use in models/); a negative one gives NaN, which a checker sees as non-finite anyway.
//   - Rewrites that introduce a non-dyadic intermediate (multiplying by a rounded 1/W and by W again) are covered
//     by k_r for values with a nonzero bound, but not for certified-exact ones; an adapter for such a target must
//     not rely on a bound of 0.
#pragma once

#include <compare>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <Eigen/Core>

#include "models/fast_rational.h"
#include "models/rational.h"
#include "models/scalar.h"
#include "models/tensor.h"

namespace accumcheck::models {

enum class FloatFormatKind { fp64, fp32, bf16, fp16 };

// The parameters of an IEEE-754 binary format (bf16 is IEEE-like: fp32's exponent range, 8 significand bits).
struct FloatFormat {
  std::string_view name;  // "fp32", as ScalarTraits<float>::name
  int significand_bits;   // p, with the hidden bit: 53, 24, 8, 11
  int exponent_min;       // emin, the exponent of the smallest normal number: -1022, -126, -126, -14
  int exponent_max;       // emax, the exponent of the largest finite number: 1023, 127, 127, 15
};

constexpr FloatFormat float_format(FloatFormatKind kind) {
  switch (kind) {
    case FloatFormatKind::fp64: return {"fp64", 53, -1022, 1023};
    case FloatFormatKind::fp32: return {"fp32", 24, -126, 127};
    case FloatFormatKind::bf16: return {"bf16", 8, -126, 127};
    case FloatFormatKind::fp16: return {"fp16", 11, -14, 15};
  }
  return {"fp64", 53, -1022, 1023};
}

// k_r: roundings charged per operation (see the file comment for why two).
inline constexpr int kRoundingAllowance = 2;
// Bits a derived certified-exact value keeps free below p, for rewrites that scale by a small integer (<= 16).
inline constexpr int kExactnessSpareBits = 4;
// Bits kept below the overflow threshold by the largest sub-product of a certified value: a rewrite that factors a
// coefficient out of a sum forms partial sums of the unscaled terms (up to 2^16 of them). A format keeps at most a
// quarter of its exponent range (fp16, whose emax is 15, keeps 3 bits: a margin of 16 would leave it no range).
inline constexpr int kCertificateRangeMarginBits = 16;
constexpr int certificate_range_margin_bits(const FloatFormat& format) {
  return format.exponent_max / 4 < kCertificateRangeMarginBits ? format.exponent_max / 4 : kCertificateRangeMarginBits;
}

// Thrown by a comparison whose branch a float evaluation may take either way: the exact operands differ by at most
// the sum of their bounds (or a bound is unbounded). what() names both exact values, the bound and the format.
// The caller reports that it cannot check this scenario in this format.
class AmbiguousComparison : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// What makes a value certified exact (see the file comment). Meaningful only while the value is certified.
struct DyadicCertificate {
  int grain_exponent;               // g: every term and rewrite intermediate is a multiple of 2^g (huge for 0)
  long double magnitude;            // B: ... of magnitude at most B
  int chain_grain_exponent_min;     // the least g over every sub-product a rewrite can form
  long double chain_magnitude_max;  // the largest B over every sub-product and partial sum a rewrite can form
};
struct MagnitudeBounds;
}  // namespace detail

template <FloatFormatKind F>
class FloatBound {
 public:
  static constexpr FloatFormatKind kFormatKind = F;
  static constexpr FloatFormat kFormat = float_format(F);

  // Zero, exactly.
  FloatBound() noexcept;
  // Implicit from integers so that Eigen's Scalar(0) and Scalar(1) work. Exact (error 0) when representable in F,
  // else charged as an input.
  FloatBound(int value) : FloatBound(static_cast<long long>(value)) {}   // NOLINT(google-explicit-constructor)
  FloatBound(long value) : FloatBound(static_cast<long long>(value)) {}  // NOLINT(google-explicit-constructor)
  FloatBound(long long value);                                            // NOLINT(google-explicit-constructor)
  // Deleted so that `x * 0.5` does not compile as `x * 0` through the int constructor; say from_rational.
  FloatBound(double) = delete;

  // An input or constant: exact value q, error 0 when q is representable in F, else k_r u |q| + eta. A q beyond
  // max finite is poisoned (the float conversion overflows).
  static FloatBound from_rational(const Rational& q);

  // The exact value, as run_oracle<FastRational> computes it.
  const FastRational& exact() const noexcept { return exact_; }
  // The bound on |computed - exact| with any pending sum closed; std::nullopt when unbounded (poisoned).
  std::optional<long double> error() const;
  // False when poisoned (overflow, NaN, division by an interval containing 0).
  bool is_bounded() const { return !closure().poisoned; }
  // The square root as the float formats take it (see the rules); the exact value is
  // ScalarTraits<FastRational>::sqrt of the exact argument, which must be >= 0 (asserted).
  FloatBound sqrt() const;
  // |x|: exact |value|, same bound.
  FloatBound abs() const;
  // Adam's update and the clip coefficient as the exact oracle rounds them (ScalarTraits<FastRational>::round_update)
  // while a float evaluation does not: the exact value truncated to 2^-64, the bound widened by the 2^-64 it may
  // have moved.
  // A value already on the grid is returned unchanged, certificate included.
  FloatBound round_update() const;

  // Exact, lazily bounded: they extend a pending sum.
  FloatBound& operator+=(const FloatBound& other);
  FloatBound& operator-=(const FloatBound& other);
  FloatBound& operator*=(const FloatBound& other) { return *this = *this * other; }
  FloatBound& operator/=(const FloatBound& other) { return *this = *this / other; }

  friend FloatBound operator+(FloatBound a, const FloatBound& b) { return a += b; }
  friend FloatBound operator-(FloatBound a, const FloatBound& b) { return a -= b; }
  friend FloatBound operator*(const FloatBound& a, const FloatBound& b) { return multiply(a, b); }
  // Throws std::domain_error when the exact divisor is zero (as FastRational does).
  friend FloatBound operator/(const FloatBound& a, const FloatBound& b) { return divide(a, b); }
  friend FloatBound operator-(FloatBound a) { return a.negate(); }
  friend FloatBound operator+(const FloatBound& a) { return a; }

  // Decided by the exact values; throw AmbiguousComparison when a float evaluation could decide otherwise.
  friend bool operator==(const FloatBound& a, const FloatBound& b) { return compare(a, b) == 0; }
  friend std::strong_ordering operator<=>(const FloatBound& a, const FloatBound& b) {
    const int order = compare(a, b);
    return order < 0 ? std::strong_ordering::less
                     : (order > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
  }

 private:
  // A value with its pending sum closed: the bound, whether it is certified exact, whether it is poisoned.
  struct Closure {
    long double error;
    bool certified;
    bool poisoned;
  };
  Closure closure() const;

  static FloatBound poisoned_value(FastRational exact);
  static FloatBound certified_value(FastRational exact, const detail::DyadicCertificate& certificate);
  // A closed value with bound `error` and |exact| <= magnitude_upper; poisoned when it may pass max finite.
  static FloatBound bounded_value(FastRational exact, long double error, long double magnitude_upper);
  static FloatBound multiply(const FloatBound& a, const FloatBound& b);
  static FloatBound divide(const FloatBound& a, const FloatBound& b);
  static int compare(const FloatBound& a, const FloatBound& b);
  FloatBound& negate();
  // Certified, exactly +-2^k, and one term (not a sum that happens to equal a power of two): multiplying by it
  // is exact scaling, whichever way a target distributes it.
  bool is_pure_power_of_two(const Closure& c) const;
  // N and R of the distributed form (see the product rule): n and M for a certified pending sum, else 1 and
  // |x| + E.
  long double distributable_term_count(const Closure& c) const;
  long double distributable_magnitude(const Closure& c, const detail::MagnitudeBounds& m) const;

  FastRational exact_;
  // The pending sum. A closed value is a sum of one term (n = 1, M = |exact| + error, term error = error); an
  // exact zero is a sum of none, since adding it never rounds. A count, kept in long double like the rest.
  long double term_count_ = 0;     // n
  long double term_magnitude_ = 0;  // M: sum over terms of |exact term| + its error
  long double term_error_ = 0;      // sum of the term errors
  bool certified_ = true;          // every term is certified exact; certificate_ describes their sum
  bool poisoned_ = false;
  detail::DyadicCertificate certificate_;
};

template <FloatFormatKind F>
FloatBound<F> abs(const FloatBound<F>& x) {
  return x.abs();
}

// The bound of x, closing any pending sum, rounded up to a Rational (exactly the long double bound, which is
// already an upper bound); std::nullopt when unbounded.
template <FloatFormatKind F>
std::optional<Rational> error_bound(const FloatBound<F>& x);

template <FloatFormatKind F>
const FastRational& exact_value(const FloatBound<F>& x) {
  return x.exact();
}

namespace detail {
constexpr std::string_view float_bound_name(FloatFormatKind kind) {
  switch (kind) {
    case FloatFormatKind::fp64: return "fp64-bound";
    case FloatFormatKind::fp32: return "fp32-bound";
    case FloatFormatKind::bf16: return "bf16-bound";
    case FloatFormatKind::fp16: return "fp16-bound";
  }
  return "fp64-bound";
}
}  // namespace detail

template <FloatFormatKind F>
struct ScalarTraits<FloatBound<F>> {
  static constexpr bool exact = false;   // it is a bound on a rounding type
  static constexpr bool checked = true;  // overflow poisons instead of wrapping or going infinite silently
  static constexpr std::string_view name = detail::float_bound_name(F);
  static FloatBound<F> from_rational(const Rational& q) { return FloatBound<F>::from_rational(q); }
  static Rational to_rational(const FloatBound<F>& x) { return x.exact().to_rational(); }
  static FloatBound<F> sqrt(const FloatBound<F>& x) { return x.sqrt(); }
  static FloatBound<F> round_update(const FloatBound<F>& x) { return x.round_update(); }
  static bool is_finite(const FloatBound<F>& x) { return x.is_bounded(); }
};

// Whole tensors and batches, each element through FloatBound<F>::from_rational.
template <FloatFormatKind F>
Matrix<FloatBound<F>> to_float_bound(const Matrix<Rational>& m);
template <FloatFormatKind F>
Parameters<FloatBound<F>> to_float_bound(const Parameters<Rational>& params);
template <FloatFormatKind F>
Gradient<FloatBound<F>> to_float_bound(const Gradient<Rational>& grad);
template <FloatFormatKind F>
Sequence<FloatBound<F>> to_float_bound(const Sequence<Rational>& seq);

}  // namespace accumcheck::models

// FloatBound<F> as an Eigen scalar, as FastRational; epsilon and dummy_precision are 0 so that no Eigen routine
// applies a tolerance of its own.
namespace Eigen {
template <accumcheck::models::FloatFormatKind F>
struct NumTraits<accumcheck::models::FloatBound<F>> : GenericNumTraits<accumcheck::models::FloatBound<F>> {
  using Real = accumcheck::models::FloatBound<F>;
  using NonInteger = accumcheck::models::FloatBound<F>;
  using Nested = accumcheck::models::FloatBound<F>;
  using Literal = accumcheck::models::FloatBound<F>;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 4,
    AddCost = 16,
    MulCost = 32
  };
  static inline int digits10() { return 0; }
  static inline Real epsilon() { return Real(0); }
  static inline Real dummy_precision() { return Real(0); }
};
}  // namespace Eigen

#include "models/float_bound-inl.h"
