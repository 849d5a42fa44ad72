// JSON readers and writers for the exact inputs; every reader names the JSON path of what it rejects.
#include "models/json/model_spec_json.h"

#include "models/json/json_reader.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace accumcheck::models::json {

using nlohmann::json;

namespace {

int int_field(const json& j, const std::string& path, const char* key, int fallback) {
  return j.contains(key) ? int_of(j.at(key), path + "." + key) : fallback;
}

Rational rational_field(const json& j, const std::string& path, const char* key, const Rational& fallback) {
  if (!j.contains(key)) return fallback;
  return rational_from_json(j.at(key), path + "." + key);
}

json matrix_to_json(const Matrix<Rational>& m) {
  json rows = json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    json row = json::array();
    for (Eigen::Index c = 0; c < m.cols(); ++c) row.push_back(to_json(m(r, c)));
    rows.push_back(std::move(row));
  }
  return rows;
}

Matrix<Rational> matrix_from_json(const json& j, const std::string& path, long rows, long cols) {
  if (!j.is_array()) fail(path, "expected an array of rows");
  if (static_cast<long>(j.size()) != rows)
    fail(path, "expected " + std::to_string(rows) + " rows, got " + std::to_string(j.size()));
  Matrix<Rational> m(rows, cols);
  for (long r = 0; r < rows; ++r) {
    const json& row = j[static_cast<std::size_t>(r)];
    const std::string row_path = path + "[" + std::to_string(r) + "]";
    if (!row.is_array() || static_cast<long>(row.size()) != cols)
      fail(row_path, "expected a row of " + std::to_string(cols) + " values");
    for (long c = 0; c < cols; ++c)
      m(r, c) = rational_from_json(row[static_cast<std::size_t>(c)], row_path + "[" + std::to_string(c) + "]");
  }
  return m;
}

std::vector<int> int_array(const json& j, const std::string& path) {
  if (!j.is_array()) fail(path, "expected an array of integers");
  std::vector<int> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer()) fail(path + "[" + std::to_string(i) + "]", "expected an integer");
    const auto v = j[i].get<long long>();
    if (v < -1000000000LL || v > 1000000000LL) fail(path + "[" + std::to_string(i) + "]", "integer out of range");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

}  // namespace

json to_json(const Rational& value) { return value.to_string(); }

Rational rational_from_json(const json& j, const std::string& path) {
  if (j.is_number_integer()) return Rational(j.get<long long>());
  if (!j.is_string()) fail(path, "expected a rational as a string (\"n\" or \"n/d\"), got " + j.dump());
  try {
    return Rational::parse(j.get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
}

json to_json(const ModelSpec& spec) {
  return json{{"kind", std::string(to_string(spec.kind))},
              {"input_size", spec.input_size},
              {"output_size", spec.output_size},
              {"hidden_size", spec.hidden_size},
              {"vocab_size", spec.vocab_size},
              {"embed_size", spec.embed_size},
              {"expert_count", spec.expert_count},
              {"frozen", spec.frozen}};
}

ModelSpec model_spec_from_json(const json& j) {
  const std::string path = "model";
  ModelSpec spec;
  const json& kind = field(j, path, "kind");
  if (!kind.is_string()) fail(path + ".kind", "expected a string");
  try {
    spec.kind = parse_model_kind(kind.get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail(path + ".kind", e.what());
  }
  spec.input_size = int_field(j, path, "input_size", spec.input_size);
  spec.output_size = int_field(j, path, "output_size", spec.output_size);
  spec.hidden_size = int_field(j, path, "hidden_size", spec.hidden_size);
  spec.vocab_size = int_field(j, path, "vocab_size", spec.vocab_size);
  spec.embed_size = int_field(j, path, "embed_size", spec.embed_size);
  spec.expert_count = int_field(j, path, "expert_count", spec.expert_count);
  if (j.contains("frozen")) {
    const json& frozen = j.at("frozen");
    if (!frozen.is_array()) fail(path + ".frozen", "expected an array of parameter names");
    for (const auto& name : frozen) {
      if (!name.is_string()) fail(path + ".frozen", "expected parameter names as strings");
      spec.frozen.push_back(name.get<std::string>());
    }
  }
  try {
    validate(spec);
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
  return spec;
}

json to_json(const TrainingSpec& spec) {
  const OptimizerSpec& o = spec.optimizer;
  return json{{"model", to_json(spec.model)},
              {"aggregation",
               {{"mode", std::string(to_string(spec.aggregation.mode))},
                {"norm_constant", to_json(spec.aggregation.norm_constant)}}},
              {"optimizer",
               {{"kind", std::string(to_string(o.kind))},
                {"lr", to_json(o.lr)},
                {"weight_decay", to_json(o.weight_decay)},
                {"momentum", to_json(o.momentum)},
                {"dampening", to_json(o.dampening)},
                {"nesterov", o.nesterov},
                {"beta1", to_json(o.beta1)},
                {"beta2", to_json(o.beta2)},
                {"eps", to_json(o.eps)},
                {"missing_gradient_is_zero", o.missing_gradient_is_zero}}},
              {"max_grad_norm", spec.max_grad_norm ? to_json(*spec.max_grad_norm) : json(nullptr)}};
}

TrainingSpec training_spec_from_json(const json& j) {
  TrainingSpec spec;
  spec.model = model_spec_from_json(field(j, "training", "model"));
  const json& agg = field(j, "training", "aggregation");
  const json& mode = field(agg, "training.aggregation", "mode");
  if (!mode.is_string()) fail("training.aggregation.mode", "expected a string");
  try {
    spec.aggregation.mode = parse_loss_aggregation(mode.get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail("training.aggregation.mode", e.what());
  }
  spec.aggregation.norm_constant =
      rational_field(agg, "training.aggregation", "norm_constant", spec.aggregation.norm_constant);
  const json& opt = field(j, "training", "optimizer");
  const std::string op = "training.optimizer";
  const json& kind = field(opt, op, "kind");
  if (!kind.is_string()) fail(op + ".kind", "expected a string");
  try {
    spec.optimizer.kind = parse_optimizer_kind(kind.get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail(op + ".kind", e.what());
  }
  OptimizerSpec& o = spec.optimizer;
  o.lr = rational_field(opt, op, "lr", o.lr);
  o.weight_decay = rational_field(opt, op, "weight_decay", o.weight_decay);
  o.momentum = rational_field(opt, op, "momentum", o.momentum);
  o.dampening = rational_field(opt, op, "dampening", o.dampening);
  if (opt.contains("nesterov")) {
    if (!opt.at("nesterov").is_boolean()) fail(op + ".nesterov", "expected true or false");
    o.nesterov = opt.at("nesterov").get<bool>();
  }
  o.beta1 = rational_field(opt, op, "beta1", o.beta1);
  o.beta2 = rational_field(opt, op, "beta2", o.beta2);
  o.eps = rational_field(opt, op, "eps", o.eps);
  if (opt.contains("missing_gradient_is_zero")) {
    if (!opt.at("missing_gradient_is_zero").is_boolean()) fail(op + ".missing_gradient_is_zero", "expected true or false");
    o.missing_gradient_is_zero = opt.at("missing_gradient_is_zero").get<bool>();
  }
  if (j.contains("max_grad_norm") && !j.at("max_grad_norm").is_null())
    spec.max_grad_norm = rational_from_json(j.at("max_grad_norm"), "training.max_grad_norm");
  try {
    validate(spec);
  } catch (const std::invalid_argument& e) {
    fail("training", e.what());
  }
  return spec;
}

json to_json(const ModelSpec& spec, const Parameters<Rational>& params) {
  const auto names = parameter_names(spec);
  json out = json::object();
  for (std::size_t p = 0; p < names.size(); ++p) out[names[p]] = matrix_to_json(params.tensors[p]);
  return out;
}

Parameters<Rational> parameters_from_json(const ModelSpec& spec, const json& j) {
  if (!j.is_object()) fail("parameters", "expected an object keyed by parameter name");
  const auto names = parameter_names(spec);
  const auto shapes = parameter_shapes(spec);
  Parameters<Rational> params;
  for (std::size_t p = 0; p < names.size(); ++p)
    params.tensors.push_back(matrix_from_json(field(j, "parameters", names[p].c_str()), "parameters." + names[p],
                                              shapes[p].first, shapes[p].second));
  if (j.size() != names.size())
    for (const auto& [key, value] : j.items())
      if (std::find(names.begin(), names.end(), key) == names.end())
        fail("parameters." + key, "not a parameter of this model");
  return params;
}

json to_json(const Sequence<Rational>& seq) {
  return json{{"features", matrix_to_json(seq.features)},
              {"token_ids", seq.token_ids},
              {"expert_index", seq.expert_index},
              {"targets", matrix_to_json(seq.targets)},
              {"loss_mask", seq.loss_mask}};
}

Sequence<Rational> sequence_from_json(const ModelSpec& spec, const json& j, const std::string& path) {
  Sequence<Rational> seq;
  const std::vector<int> mask = int_array(field(j, path, "loss_mask"), path + ".loss_mask");
  const long T = static_cast<long>(mask.size());
  for (std::size_t t = 0; t < mask.size(); ++t) {
    if (mask[t] != 0 && mask[t] != 1) fail(path + ".loss_mask[" + std::to_string(t) + "]", "expected 0 or 1");
    seq.loss_mask.push_back(static_cast<std::uint8_t>(mask[t]));
  }
  if (spec.kind == ModelKind::tied_embedding) {
    seq.token_ids = int_array(field(j, path, "token_ids"), path + ".token_ids");
    seq.features = Matrix<Rational>(T, 0);
  } else {
    seq.features = matrix_from_json(field(j, path, "features"), path + ".features", T, spec.input_size);
  }
  if (j.contains("expert_index")) seq.expert_index = int_array(j.at("expert_index"), path + ".expert_index");
  seq.targets = matrix_from_json(field(j, path, "targets"), path + ".targets", T, target_size(spec));
  try {
    validate_sequence(spec, seq);
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
  return seq;
}

}  // namespace accumcheck::models::json
