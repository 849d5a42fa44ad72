// ResultBounds: zeros, and the reasons a computation has no bound.
#include "sim/result_bounds.h"

#include <algorithm>

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

namespace {

bool same_shape(const std::vector<models::Matrix<Rational>>& a, const std::vector<models::Matrix<Rational>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].rows() != b[i].rows() || a[i].cols() != b[i].cols()) return false;
  return true;
}

void raise_to(std::vector<models::Matrix<Rational>>& a, const std::vector<models::Matrix<Rational>>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    for (Eigen::Index j = 0; j < a[i].size(); ++j) a[i](j) = std::max(a[i](j), b[i](j));
}

void raise_to(std::vector<Rational>& a, const std::vector<Rational>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

}  // namespace

bool ResultBounds::widen_to(const ResultBounds& other) {
  if (step_gradient.size() != other.step_gradient.size() || step_grad_norm.size() != other.step_grad_norm.size() ||
      step_clip_coefficient.size() != other.step_clip_coefficient.size() || !same_shape(parameters, other.parameters) ||
      !same_shape(first_moment, other.first_moment) || !same_shape(second_moment, other.second_moment))
    return false;
  for (std::size_t i = 0; i < step_gradient.size(); ++i)
    if (!same_shape(step_gradient[i], other.step_gradient[i])) return false;
  for (std::size_t i = 0; i < step_gradient.size(); ++i) raise_to(step_gradient[i], other.step_gradient[i]);
  raise_to(step_grad_norm, other.step_grad_norm);
  raise_to(step_clip_coefficient, other.step_clip_coefficient);
  raise_to(parameters, other.parameters);
  raise_to(first_moment, other.first_moment);
  raise_to(second_moment, other.second_moment);
  return true;
}

std::string ambiguous_comparison_reason(const models::AmbiguousComparison& e) {
  return std::string("no rounding bound: a comparison in the computation is within rounding of its threshold, so a "
                     "float run may take either branch (") + e.what() + ")";
}

}  // namespace accumcheck::sim
