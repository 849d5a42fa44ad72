// ModelSpec: everything needed to rebuild a synthetic model exactly (kind, sizes, per-parameter options).
//
// Parameters are named and ordered; the order is the order of Parameters::tensors and Gradient::tensors.
//   linear, expert_count == 1:  weight [O, I], bias [O, 1]
//   linear, expert_count == E:  expert{e}.weight [O, I], expert{e}.bias [O, 1] for e in [0, E)
//   mlp:                        fc1.weight [H, I], fc1.bias [H, 1], fc2.weight [O, H], fc2.bias [O, 1]
//   tied_embedding:             embedding [V, D] (used twice: input lookup and output projection), bias [V, 1]
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/assert.h"

namespace accumcheck::models {

enum class ModelKind {
  // Per-token linear regression, optionally with routed experts: prediction W_e x_t + b_e.
  linear,
  // Two-layer MLP with ReLU: W2 relu(W1 x_t + b1) + b2. Piecewise linear, so still exact in rationals.
  mlp,
  // Embedding table shared by the input lookup and the output projection: E (E[id_t]) + b.
  tied_embedding,
};

std::string_view to_string(ModelKind kind);
// Throws std::invalid_argument naming the text and the accepted names.
ModelKind parse_model_kind(std::string_view text);

struct ModelSpec {
  ModelKind kind = ModelKind::linear;
  int input_size = 1;   // I (linear, mlp)
  int output_size = 1;  // O (linear, mlp)
  int hidden_size = 0;  // H (mlp)
  int vocab_size = 0;   // V (tied_embedding)
  int embed_size = 0;   // D (tied_embedding)
  int expert_count = 1;  // E (linear)
  // Names of parameters that are frozen (requires_grad = False): never given a gradient, never updated.
  std::vector<std::string> frozen;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// Upper bounds on sizes: the models are tiny by design, and the bounds keep a malformed spec from asking
// for gigabytes.
inline constexpr int kModelDimensionMax = 4096;
inline constexpr int kExpertCountMax = 64;

// Throws std::invalid_argument naming the first problem (a size out of range, an unknown frozen name).
void validate(const ModelSpec& spec);

std::vector<std::string> parameter_names(const ModelSpec& spec);
// The index of the parameter parameter_names(spec) calls `name`, without building the names; nullopt where no
// parameter has that name.
std::optional<std::size_t> parameter_index(const ModelSpec& spec, std::string_view name);

// (rows, cols) of each parameter, in order, computed on demand from a copy of the sizes: a trial asks dozens of
// times, and a list it had to allocate each time was the largest single source of allocations in a small trial.
// Each model's shapes repeat with a period (the linear model's two per expert), so a view holds one period.
class ParameterShapes {
 public:
  using value_type = std::pair<int, int>;
  // Inline, as is every read: a trial builds one about ten times (a fresh gradient, a validation, a reshape), and
  // out of line each was a call and a division by the period (1% of a trial's CPU time at the peer's sizes).
  explicit ParameterShapes(const ModelSpec& spec) {
    switch (spec.kind) {
      case ModelKind::linear:
        period_shapes_ = {{{spec.output_size, spec.input_size}, {spec.output_size, 1}}};
        period_ = 2;
        count_ = 2 * static_cast<std::size_t>(spec.expert_count > 0 ? spec.expert_count : 0);
        return;
      case ModelKind::mlp:
        period_shapes_ = {{{spec.hidden_size, spec.input_size},
                           {spec.hidden_size, 1},
                           {spec.output_size, spec.hidden_size},
                           {spec.output_size, 1}}};
        period_ = count_ = 4;
        return;
      case ModelKind::tied_embedding:
        period_shapes_ = {{{spec.vocab_size, spec.embed_size}, {spec.vocab_size, 1}}};
        period_ = count_ = 2;
        return;
    }
    ACCUMCHECK_ASSERT_MSG(false, "unknown ModelKind");
  }
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Every period is a power of two (2 or 4), so p mod period is a mask.
  value_type operator[](std::size_t p) const { return period_shapes_[p & (period_ - 1)]; }

  class iterator {
   public:
    using value_type = ParameterShapes::value_type;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const ParameterShapes* shapes, std::size_t p) : shapes_(shapes), p_(p) {}
    value_type operator*() const { return (*shapes_)[p_]; }
    iterator& operator++() { ++p_; return *this; }
    iterator operator++(int) { iterator before = *this; ++p_; return before; }
    friend bool operator==(const iterator& a, const iterator& b) { return a.p_ == b.p_; }

   private:
    const ParameterShapes* shapes_ = nullptr;
    std::size_t p_ = 0;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, count_}; }

 private:
  std::array<value_type, 4> period_shapes_{};
  std::size_t period_ = 1;
  std::size_t count_ = 0;
};

inline ParameterShapes parameter_shapes(const ModelSpec& spec) { return ParameterShapes(spec); }
// Number of parameters (tensors), without building their shapes or names.
inline std::size_t parameter_count(const ModelSpec& spec) { return ParameterShapes(spec).size(); }
std::vector<bool> frozen_mask(const ModelSpec& spec);
// Number of scalar values the optimizer may change: the elements of every parameter that is not frozen.
std::size_t trainable_value_count(const ModelSpec& spec);
// Input width a sequence's features must have (0 for tied_embedding) and the target width.
inline int feature_size(const ModelSpec& spec) { return spec.kind == ModelKind::tied_embedding ? 0 : spec.input_size; }
inline int target_size(const ModelSpec& spec) { return spec.kind == ModelKind::tied_embedding ? spec.vocab_size : spec.output_size; }

namespace detail {
// validate_sequence's failures (models/model.h), each message built here, out of line and on the cold path, so that
// the checks inline: with their messages' strings inline, the checks had cost about 70 instructions a sequence, run
// twice a trial (the target's scenario and the oracle's), 1% of a trial at the peer's sizes (bench/README.md).
//   "sequence: <field> must be [<rows>, <cols>], got [<actual rows>, <actual cols>]"
[[noreturn, gnu::cold]] void throw_sequence_shape(std::string_view field, long rows, long cols, long actual_rows, long actual_cols);
//   "sequence: <field> has <entries> entries for <tokens> tokens"
[[noreturn, gnu::cold]] void throw_sequence_count(std::string_view field, std::size_t entries, int tokens);
//   "sequence: token <token> <what> <value> outside [0, <bound>)"
[[noreturn, gnu::cold]] void throw_sequence_index(int token, std::string_view what, int value, int bound);
//   "sequence: loss_mask of token <token> is <value> (expected 0 or 1)"
[[noreturn, gnu::cold]] void throw_sequence_mask(int token, int value);
}  // namespace detail

}  // namespace accumcheck::models
