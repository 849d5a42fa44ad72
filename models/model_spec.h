// ModelSpec: everything needed to rebuild a synthetic model exactly (kind, sizes, per-parameter options).
//
// Parameters are named and ordered; the order is the order of Parameters::tensors and Gradient::tensors.
//   linear, expert_count == 1:  weight [O, I], bias [O, 1]
//   linear, expert_count == E:  expert{e}.weight [O, I], expert{e}.bias [O, 1] for e in [0, E)
//   mlp:                        fc1.weight [H, I], fc1.bias [H, 1], fc2.weight [O, H], fc2.bias [O, 1]
//   tied_embedding:             embedding [V, D] (used twice: input lookup and output projection), bias [V, 1]
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
// (rows, cols) of each parameter, in order.
std::vector<std::pair<int, int>> parameter_shapes(const ModelSpec& spec);
std::vector<bool> frozen_mask(const ModelSpec& spec);
// Number of scalar values the optimizer may change: the elements of every parameter that is not frozen.
std::size_t trainable_value_count(const ModelSpec& spec);
// Input width a sequence's features must have (0 for tied_embedding) and the target width.
int feature_size(const ModelSpec& spec);
int target_size(const ModelSpec& spec);

}  // namespace accumcheck::models
