// ResultBounds: zeros, and the reasons a computation has no bound.
#include "sim/result_bounds.h"

namespace accumcheck::sim {

ResultBounds ResultBounds::zero(const models::ModelSpec& spec, std::size_t step_count) {
  ResultBounds b;
  std::vector<models::Matrix<Rational>> zeros;
  for (const auto& [rows, cols] : models::parameter_shapes(spec)) zeros.push_back(models::Matrix<Rational>::Zero(rows, cols));
  b.step_gradient.assign(step_count, zeros);
  b.step_grad_norm.assign(step_count, Rational(0));
  b.step_clip_coefficient.assign(step_count, Rational(0));
  b.parameters = b.first_moment = b.second_moment = zeros;
  return b;
}

std::string ambiguous_comparison_reason(const models::AmbiguousComparison& e) {
  return std::string("no rounding bound: a comparison in the computation is within rounding of its threshold, so a "
                     "float run may take either branch (") + e.what() + ")";
}

}  // namespace accumcheck::sim
