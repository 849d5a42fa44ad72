// ModelSpec naming, shapes and validation.
#include "models/model_spec.h"

#include <algorithm>
#include <stdexcept>

#include "models/assert.h"

namespace accumcheck::models {

std::string_view to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::linear: return "linear";
    case ModelKind::mlp: return "mlp";
    case ModelKind::tied_embedding: return "tied_embedding";
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ModelKind");
}

ModelKind parse_model_kind(std::string_view text) {
  if (text == "linear") return ModelKind::linear;
  if (text == "mlp") return ModelKind::mlp;
  if (text == "tied_embedding") return ModelKind::tied_embedding;
  throw std::invalid_argument("unknown model kind '" + std::string(text) +
                              "' (expected linear, mlp or tied_embedding)");
}

namespace {
[[noreturn, gnu::cold]] void throw_out_of_range(std::string_view field, int value, int lo, int hi) {
  throw std::invalid_argument("model spec: " + std::string(field) + " = " + std::to_string(value) +
                              " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The check inline, its message out of line (validate runs twice a trial).
void require_dimension(std::string_view field, int value, int lo, int hi) {
  if (value < lo || value > hi) [[unlikely]] throw_out_of_range(field, value, lo, hi);
}
}  // namespace

void validate(const ModelSpec& spec) {
  switch (spec.kind) {
    case ModelKind::linear:
      require_dimension("input_size", spec.input_size, 1, kModelDimensionMax);
      require_dimension("output_size", spec.output_size, 1, kModelDimensionMax);
      require_dimension("expert_count", spec.expert_count, 1, kExpertCountMax);
      break;
    case ModelKind::mlp:
      require_dimension("input_size", spec.input_size, 1, kModelDimensionMax);
      require_dimension("output_size", spec.output_size, 1, kModelDimensionMax);
      require_dimension("hidden_size", spec.hidden_size, 1, kModelDimensionMax);
      break;
    case ModelKind::tied_embedding:
      require_dimension("vocab_size", spec.vocab_size, 1, kModelDimensionMax);
      require_dimension("embed_size", spec.embed_size, 1, kModelDimensionMax);
      break;
  }
  for (const auto& f : spec.frozen)
    if (!parameter_index(spec, f))
      throw std::invalid_argument("model spec: frozen parameter '" + f + "' is not a parameter of this " +
                                  std::string(to_string(spec.kind)) + " model");
}

std::vector<std::string> parameter_names(const ModelSpec& spec) {
  switch (spec.kind) {
    case ModelKind::linear: {
      if (spec.expert_count == 1) return {"weight", "bias"};
      std::vector<std::string> names;
      for (int e = 0; e < spec.expert_count; ++e) {
        names.push_back("expert" + std::to_string(e) + ".weight");
        names.push_back("expert" + std::to_string(e) + ".bias");
      }
      return names;
    }
    case ModelKind::mlp: return {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    case ModelKind::tied_embedding: return {"embedding", "bias"};
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ModelKind");
}

std::optional<std::size_t> parameter_index(const ModelSpec& spec, std::string_view name) {
  const auto among = [&name](std::initializer_list<std::string_view> names) -> std::optional<std::size_t> {
    std::size_t p = 0;
    for (const std::string_view n : names) {
      if (n == name) return p;
      ++p;
    }
    return std::nullopt;
  };
  switch (spec.kind) {
    case ModelKind::linear: {
      if (spec.expert_count == 1) return among({"weight", "bias"});
      // "expert<e>.weight" or "expert<e>.bias", e in [0, E) written as std::to_string writes it (no sign, no
      // leading zero).
      constexpr std::string_view prefix = "expert";
      if (!name.starts_with(prefix)) return std::nullopt;
      name.remove_prefix(prefix.size());
      const std::size_t dot = name.find('.');
      if (dot == 0 || dot == std::string_view::npos || dot > 9 || (name[0] == '0' && dot > 1)) return std::nullopt;
      long e = 0;
      for (std::size_t i = 0; i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9') return std::nullopt;
        e = 10 * e + (name[i] - '0');
      }
      if (e >= spec.expert_count) return std::nullopt;
      name.remove_prefix(dot + 1);
      const auto which = among({"weight", "bias"});
      if (!which) return std::nullopt;
      return 2 * static_cast<std::size_t>(e) + *which;
    }
    case ModelKind::mlp: return among({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
    case ModelKind::tied_embedding: return among({"embedding", "bias"});
  }
  ACCUMCHECK_ASSERT_MSG(false, "unknown ModelKind");
}

std::vector<bool> frozen_mask(const ModelSpec& spec) {
  std::vector<bool> mask(parameter_count(spec), false);
  for (const auto& f : spec.frozen)
    if (const auto p = parameter_index(spec, f)) mask[*p] = true;
  return mask;
}

std::size_t trainable_value_count(const ModelSpec& spec) {
  const auto shapes = parameter_shapes(spec);
  const auto frozen = frozen_mask(spec);
  std::size_t count = 0;
  for (std::size_t p = 0; p < shapes.size(); ++p)
    if (!frozen[p]) count += static_cast<std::size_t>(shapes[p].first) * static_cast<std::size_t>(shapes[p].second);
  return count;
}

namespace detail {

void throw_sequence_shape(std::string_view field, long rows, long cols, long actual_rows, long actual_cols) {
  throw std::invalid_argument("sequence: " + std::string(field) + " must be [" + std::to_string(rows) + ", " +
                              std::to_string(cols) + "], got [" + std::to_string(actual_rows) + ", " +
                              std::to_string(actual_cols) + "]");
}

void throw_sequence_count(std::string_view field, std::size_t entries, int tokens) {
  throw std::invalid_argument("sequence: " + std::string(field) + " has " + std::to_string(entries) + " entries for " +
                              std::to_string(tokens) + " tokens");
}

void throw_sequence_index(int token, std::string_view what, int value, int bound) {
  throw std::invalid_argument("sequence: token " + std::to_string(token) + " " + std::string(what) + " " +
                              std::to_string(value) + " outside [0, " + std::to_string(bound) + ")");
}

void throw_sequence_mask(int token, int value) {
  throw std::invalid_argument("sequence: loss_mask of token " + std::to_string(token) + " is " + std::to_string(value) +
                              " (expected 0 or 1)");
}

}  // namespace detail

}  // namespace accumcheck::models
