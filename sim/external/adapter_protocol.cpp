// Adapter protocol messages: capabilities, run requests, results (docs/adapter-protocol.md).
#include "sim/external/adapter_protocol.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "models/json/model_spec_json.h"
#include "models/model.h"
#include "sim/json/scenario_json.h"

namespace accumcheck::sim::external {

using nlohmann::json;
using models::Rational;

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::exact: return "exact";
    case DType::fp32: return "fp32";
    case DType::fp64: return "fp64";
  }
  return "?";
}

DType dtype_of(ScalarKind scalar) {
  switch (scalar) {
    case ScalarKind::rational:
    case ScalarKind::fast_rational: return DType::exact;
    case ScalarKind::fp32: return DType::fp32;
    case ScalarKind::fp64: return DType::fp64;
    case ScalarKind::fixed32: break;
  }
  throw std::invalid_argument("an external adapter computes in exact, fp32 or fp64, not " + std::string(to_string(scalar)));
}

ScalarKind scalar_of(DType dtype) {
  switch (dtype) {
    case DType::exact: return ScalarKind::rational;
    case DType::fp32: return ScalarKind::fp32;
    case DType::fp64: return ScalarKind::fp64;
  }
  return ScalarKind::rational;
}

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ProtocolError("adapter reply " + path + ": " + what);
}

const json& field(const json& j, const std::string& path, const char* key) {
  if (!j.is_object()) fail(path, "expected an object, got " + j.dump().substr(0, 200));
  const auto it = j.find(key);
  if (it == j.end()) fail(path, std::string("missing field '") + key + "'");
  return *it;
}

bool bool_field(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_boolean()) fail(path + "." + key, "expected true or false, got " + v.dump());
  return v.get<bool>();
}

int int_of(const json& v, const std::string& path, int lo, int hi) {
  if (!v.is_number_integer()) fail(path, "expected an integer, got " + v.dump());
  const auto x = v.get<long long>();
  if (x < lo || x > hi) fail(path, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

// A non-empty list whose every element `read` accepts; duplicates are harmless and kept once.
template <class T, class Read>
std::vector<T> list_field(const json& j, const std::string& path, const char* key, Read read) {
  const json& v = field(j, path, key);
  const std::string p = path + "." + key;
  if (!v.is_array()) fail(p, "expected a list, got " + v.dump());
  if (v.empty()) fail(p, "is empty: an adapter that can run nothing is misconfigured");
  std::vector<T> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    T x = read(v[i], p + "[" + std::to_string(i) + "]");
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return out;
}

template <class T, class Parse>
auto named_reader(Parse parse) {
  return [parse](const json& v, const std::string& p) -> T {
    if (!v.is_string()) fail(p, "expected a name, got " + v.dump());
    try {
      return parse(v.get<std::string>());
    } catch (const std::invalid_argument& e) {
      fail(p, e.what());
    }
  };
}

DType parse_dtype(std::string_view text) {
  for (DType d : {DType::exact, DType::fp32, DType::fp64})
    if (to_string(d) == text) return d;
  throw std::invalid_argument("unknown dtype '" + std::string(text) + "' (exact, fp32 or fp64)");
}

template <class T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

template <class T, class Name>
std::string names(const std::vector<T>& v, Name name) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::string(name(v[i]));
  return out + "]";
}

std::string bool_name(bool b) { return b ? "true" : "false"; }

// A value of a result: a JSON number (exactly its double), or a string "n/d", "inf", "-inf", "nan".
// Non-finite values come back as absent (std::nullopt) and are reported by the caller.
std::optional<Rational> number_of(const json& v, const std::string& path) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) return std::nullopt;
    return Rational::from_double(d);
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf" || s == "-inf" || s == "nan") return std::nullopt;
    try {
      return Rational::parse(s);
    } catch (const std::invalid_argument& e) {
      fail(path, "'" + s + "' is not a number: " + e.what());
    }
  }
  fail(path, "expected a number, got " + v.dump().substr(0, 100));
}

Rational finite_number(const json& v, const std::string& path) {
  auto q = number_of(v, path);
  if (!q) fail(path, "is " + v.dump() + ": not a finite number");
  return *q;
}

models::Matrix<Rational> matrix_of(const json& v, const std::string& path, int rows, int cols) {
  if (!v.is_array() || static_cast<int>(v.size()) != rows)
    fail(path, "expected " + std::to_string(rows) + " rows of " + std::to_string(cols) + " values, got " + v.dump().substr(0, 100));
  models::Matrix<Rational> m(rows, cols);
  for (int r = 0; r < rows; ++r) {
    const json& row = v[static_cast<std::size_t>(r)];
    const std::string rp = path + "[" + std::to_string(r) + "]";
    if (!row.is_array() || static_cast<int>(row.size()) != cols)
      fail(rp, "expected a row of " + std::to_string(cols) + " values, got " + row.dump().substr(0, 100));
    for (int c = 0; c < cols; ++c) m(r, c) = finite_number(row[static_cast<std::size_t>(c)], rp + "[" + std::to_string(c) + "]");
  }
  return m;
}

bool exact_in(const Rational& q, DType dtype);

json float_matrix(const models::Matrix<Rational>& m, DType dtype, const std::string& where) {
  json rows = json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    json row = json::array();
    for (Eigen::Index c = 0; c < m.cols(); ++c) {
      const Rational& q = m(r, c);
      // The protocol promises values that decode exactly; unsupported_reason refuses scenarios that break it.
      ACCUMCHECK_ASSERT_MSG(exact_in(q, dtype), ("value " + q.to_string() + " of " + where + " is not exact in " +
                                                 std::string(to_string(dtype))).c_str());
      row.push_back(q.to_double());
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

json float_of(const Rational& q) { return q.to_double(); }

bool exact_in(const Rational& q, DType dtype) {
  if (dtype == DType::exact) return true;
  const double d = q.to_double();
  if (!std::isfinite(d) || Rational::from_double(d) != q) return false;
  return dtype == DType::fp64 || (std::isfinite(static_cast<float>(d)) && static_cast<double>(static_cast<float>(d)) == d);
}

// The first data value (initial parameter, feature, target) that is not exact in dtype, as words; empty if none.
std::string inexact_value(const Scenario& s, DType dtype) {
  auto scan = [&](const models::Matrix<Rational>& m, const std::string& what) -> std::string {
    for (Eigen::Index i = 0; i < m.size(); ++i)
      if (!exact_in(m(i), dtype))
        return "the " + what + " value " + m(i).to_string() + " is not exact in " + std::string(to_string(dtype)) +
               " (the protocol sends only data that decode exactly)";
    return {};
  };
  for (const auto& t : s.initial_parameters.tensors)
    if (auto why = scan(t, "initial parameter"); !why.empty()) return why;
  for (const auto& plan : s.steps)
    for (const auto& mb : plan.micro_batches)
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) {
          if (auto why = scan(seq.features, "feature"); !why.empty()) return why;
          if (auto why = scan(seq.targets, "target"); !why.empty()) return why;
        }
  return {};
}

}  // namespace

Capabilities capabilities_from_json(const json& j) {
  const std::string p = "capabilities";
  Capabilities c;
  c.models = list_field<models::ModelKind>(j, p, "models", named_reader<models::ModelKind>(models::parse_model_kind));
  c.experts = bool_field(j, p, "experts");
  c.frozen_parameters = bool_field(j, p, "frozen_parameters");
  c.aggregations = list_field<models::LossAggregation>(j, p, "aggregations", named_reader<models::LossAggregation>(models::parse_loss_aggregation));
  c.optimizers = list_field<models::OptimizerKind>(j, p, "optimizers", named_reader<models::OptimizerKind>(models::parse_optimizer_kind));
  c.momentum = bool_field(j, p, "momentum");
  c.weight_decay = bool_field(j, p, "weight_decay");
  c.clipping = bool_field(j, p, "clipping");
  c.world_sizes = list_field<int>(j, p, "world_sizes", [](const json& v, const std::string& q) { return int_of(v, q, 1, kRankCountMax); });
  c.zero_stages = list_field<int>(j, p, "zero_stages", [](const json& v, const std::string& q) { return int_of(v, q, 0, 3); });
  c.offload = list_field<bool>(j, p, "offload", [](const json& v, const std::string& q) {
    if (!v.is_boolean()) fail(q, "expected true or false, got " + v.dump());
    return v.get<bool>();
  });
  c.dtypes = list_field<DType>(j, p, "dtypes", named_reader<DType>(parse_dtype));
  c.precisions = list_field<Precision>(j, p, "precisions", named_reader<Precision>(parse_precision));
  c.loss_scaling = bool_field(j, p, "loss_scaling");
  c.boundary = list_field<BoundaryMode>(j, p, "boundary", named_reader<BoundaryMode>(parse_boundary_mode));
  c.step_after_every_backward = list_field<bool>(j, p, "step_after_every_backward", [](const json& v, const std::string& q) {
    if (!v.is_boolean()) fail(q, "expected true or false, got " + v.dump());
    return v.get<bool>();
  });
  c.uneven_windows = bool_field(j, p, "uneven_windows");
  c.checkpoint = bool_field(j, p, "checkpoint");
  const json& r = field(j, p, "reports");
  const std::string rp = p + ".reports";
  c.reports = Reports{bool_field(r, rp, "applied_gradient"), bool_field(r, rp, "grad_norm"), bool_field(r, rp, "clip_coefficient"),
                      bool_field(r, rp, "optimizer_state")};
  c.missing_gradient_is_zero = bool_field(j, p, "missing_gradient_is_zero");
  const json& l = field(j, p, "limits");
  const std::string lp = p + ".limits";
  c.limits.rank_count_max = int_of(field(l, lp, "rank_count_max"), lp + ".rank_count_max", 1, kRankCountMax);
  c.limits.step_count_max = int_of(field(l, lp, "step_count_max"), lp + ".step_count_max", 1, kStepCountMax);
  c.limits.micro_batch_count_max =
      int_of(field(l, lp, "micro_batch_count_max"), lp + ".micro_batch_count_max", 1, kMicroBatchesPerWindowMax);
  c.limits.token_count_max = int_of(field(l, lp, "token_count_max"), lp + ".token_count_max", 1, 1 << 24);
  if (*std::min_element(c.world_sizes.begin(), c.world_sizes.end()) > c.limits.rank_count_max)
    fail(lp + ".rank_count_max", "is below every world size the adapter lists");
  if (c.precisions.size() == 1 && c.precisions[0] != Precision::full && !has(c.dtypes, DType::fp32))
    fail(p + ".precisions", "16-bit precisions need fp32 master weights, and dtypes lacks fp32");
  return c;
}

json to_json(const Capabilities& c) {
  auto list = [](const auto& v, auto name) {
    json out = json::array();
    for (const auto& x : v) out.push_back(name(x));
    return out;
  };
  auto str = [](auto x) { return std::string(to_string(x)); };
  auto models_str = [](auto x) { return std::string(models::to_string(x)); };
  auto same = [](auto x) { return x; };
  return json{{"models", list(c.models, models_str)},
              {"experts", c.experts},
              {"frozen_parameters", c.frozen_parameters},
              {"aggregations", list(c.aggregations, models_str)},
              {"optimizers", list(c.optimizers, models_str)},
              {"momentum", c.momentum},
              {"weight_decay", c.weight_decay},
              {"clipping", c.clipping},
              {"world_sizes", c.world_sizes},
              {"zero_stages", c.zero_stages},
              {"offload", list(c.offload, same)},
              {"dtypes", list(c.dtypes, str)},
              {"precisions", list(c.precisions, str)},
              {"loss_scaling", c.loss_scaling},
              {"boundary", list(c.boundary, str)},
              {"step_after_every_backward", list(c.step_after_every_backward, same)},
              {"uneven_windows", c.uneven_windows},
              {"checkpoint", c.checkpoint},
              {"reports",
               {{"applied_gradient", c.reports.applied_gradient},
                {"grad_norm", c.reports.grad_norm},
                {"clip_coefficient", c.reports.clip_coefficient},
                {"optimizer_state", c.reports.optimizer_state}}},
              {"missing_gradient_is_zero", c.missing_gradient_is_zero},
              {"limits",
               {{"rank_count_max", c.limits.rank_count_max},
                {"step_count_max", c.limits.step_count_max},
                {"micro_batch_count_max", c.limits.micro_batch_count_max},
                {"token_count_max", c.limits.token_count_max}}}};
}

std::string unsupported_reason(const Capabilities& c, const Scenario& s, DType dtype) {
  const auto& m = s.training.model;
  const auto& o = s.training.optimizer;
  const auto& e = s.engine;
  auto str = [](auto x) { return std::string(to_string(x)); };
  auto mstr = [](auto x) { return std::string(models::to_string(x)); };
  if (!has(c.dtypes, dtype)) return "the adapter's dtypes are " + names(c.dtypes, str) + "; the run asks for " + str(dtype);
  if (!has(c.models, m.kind)) return "the adapter's models are " + names(c.models, mstr) + "; the scenario has " + mstr(m.kind);
  if (m.kind == models::ModelKind::linear && m.expert_count > 1 && !c.experts) return "the adapter has no routed experts (experts: false)";
  if (!m.frozen.empty() && !c.frozen_parameters) return "the adapter has no frozen parameters (frozen_parameters: false)";
  if (!has(c.aggregations, s.training.aggregation.mode))
    return "the adapter's aggregations are " + names(c.aggregations, mstr) + "; the scenario uses " + mstr(s.training.aggregation.mode);
  if (!has(c.optimizers, o.kind)) return "the adapter's optimizers are " + names(c.optimizers, mstr) + "; the scenario uses " + mstr(o.kind);
  if ((!o.momentum.is_zero() || !o.dampening.is_zero() || o.nesterov) && !c.momentum) return "the adapter has no SGD momentum (momentum: false)";
  if (!o.weight_decay.is_zero() && !c.weight_decay) return "the adapter has no weight decay (weight_decay: false)";
  if (s.training.max_grad_norm && !c.clipping) return "the adapter has no gradient clipping (clipping: false)";
  if (!has(c.world_sizes, e.rank_count))
    return "the adapter's world_sizes are " + names(c.world_sizes, [](int x) { return std::to_string(x); }) + "; the scenario has " +
           std::to_string(e.rank_count) + " ranks";
  if (!has(c.zero_stages, e.zero_stage))
    return "the adapter's zero_stages are " + names(c.zero_stages, [](int x) { return std::to_string(x); }) + "; the scenario has ZeRO-" +
           std::to_string(e.zero_stage);
  if (!has(c.offload, e.offload)) return "the adapter's offload is " + names(c.offload, bool_name) + "; the scenario has offload " + bool_name(e.offload);
  if (!has(c.precisions, e.precision)) return "the adapter's precisions are " + names(c.precisions, str) + "; the scenario has " + str(e.precision);
  if (e.precision != Precision::full && dtype != DType::fp32) return "16-bit precision needs fp32 master weights, not " + str(dtype);
  if (e.loss_scaler && !c.loss_scaling) return "the adapter has no loss scaling (loss_scaling: false)";
  if (!has(c.boundary, e.boundary)) return "the adapter's boundary modes are " + names(c.boundary, str) + "; the scenario's is " + str(e.boundary);
  if (!has(c.step_after_every_backward, e.step_after_every_backward))
    return "the adapter's step_after_every_backward is " + names(c.step_after_every_backward, bool_name) + "; the scenario's is " +
           bool_name(e.step_after_every_backward);
  if (s.checkpoint_after_step && !c.checkpoint) return "the adapter cannot checkpoint and resume (checkpoint: false)";
  if (static_cast<int>(s.steps.size()) > c.limits.step_count_max)
    return "the scenario has " + std::to_string(s.steps.size()) + " steps; the adapter's step_count_max is " + std::to_string(c.limits.step_count_max);
  long tokens = 0;
  for (const auto& plan : s.steps) {
    const int k = static_cast<int>(plan.micro_batches.size());
    if (k > c.limits.micro_batch_count_max)
      return "a window has " + std::to_string(k) + " micro-batches; the adapter's micro_batch_count_max is " +
             std::to_string(c.limits.micro_batch_count_max);
    if (k != e.accumulation_steps && !c.uneven_windows)
      return "a window has " + std::to_string(k) + " micro-batches where G = " + std::to_string(e.accumulation_steps) +
             "; the adapter runs no uneven windows (uneven_windows: false)";
    for (const auto& mb : plan.micro_batches)
      for (const auto& rank : mb.rank_sequences)
        for (const auto& seq : rank) tokens += seq.token_count();
  }
  if (tokens > c.limits.token_count_max)
    return "the scenario has " + std::to_string(tokens) + " tokens; the adapter's token_count_max is " + std::to_string(c.limits.token_count_max);
  return inexact_value(s, dtype);
}

json engine_calls(const Scenario& s) {
  json calls = json::array();
  const bool manual = s.engine.boundary == BoundaryMode::manual;
  for (std::size_t st = 0; st < s.steps.size(); ++st) {
    const std::size_t window = s.steps[st].micro_batches.size();
    for (std::size_t k = 0; k < window; ++k) {
      if (manual) calls.push_back({{"call", "set_boundary"}, {"value", k + 1 == window}});
      calls.push_back({{"call", "backward"}, {"step", st}, {"micro_batch", k}});
      if (s.engine.step_after_every_backward) calls.push_back({{"call", "step"}});
    }
    if (!s.engine.step_after_every_backward) calls.push_back({{"call", "step"}});
    calls.push_back({{"call", "end_window"}, {"step", st}});
    if (s.checkpoint_after_step && *s.checkpoint_after_step == static_cast<int>(st)) calls.push_back({{"call", "checkpoint"}, {"step", st}});
  }
  return calls;
}

json hello_request(const std::string& client) {
  return json{{"type", "hello"}, {"id", 0}, {"protocol", kProtocolVersion}, {"client", client}};
}

json run_request(std::int64_t id, const Scenario& s, DType dtype) {
  const auto& model = s.training.model;
  const auto names = models::parameter_names(model);
  json params = json::object();
  for (std::size_t p = 0; p < names.size(); ++p)
    params[names[p]] = float_matrix(s.initial_parameters.tensors[p], dtype, "initial parameter " + names[p]);
  json steps = json::array();
  for (std::size_t st = 0; st < s.steps.size(); ++st) {
    json window = json::array();
    for (const auto& mb : s.steps[st].micro_batches) {
      json ranks = json::array();
      for (const auto& rank : mb.rank_sequences) {
        json seqs = json::array();
        for (const auto& seq : rank)
          seqs.push_back({{"features", float_matrix(seq.features, dtype, "features")}, {"targets", float_matrix(seq.targets, dtype, "targets")}});
        ranks.push_back(std::move(seqs));
      }
      window.push_back(std::move(ranks));
    }
    steps.push_back(std::move(window));
  }
  const auto& o = s.training.optimizer;
  json training{{"lr", float_of(o.lr)},
                {"weight_decay", float_of(o.weight_decay)},
                {"momentum", float_of(o.momentum)},
                {"dampening", float_of(o.dampening)},
                {"beta1", float_of(o.beta1)},
                {"beta2", float_of(o.beta2)},
                {"eps", float_of(o.eps)},
                {"max_grad_norm", s.training.max_grad_norm ? float_of(*s.training.max_grad_norm) : json(nullptr)},
                {"norm_constant", float_of(s.training.aggregation.norm_constant)}};
  return json{{"type", "run"},
              {"id", id},
              {"dtype", std::string(to_string(dtype))},
              {"scenario", to_json(s)},
              {"values", {{"initial_parameters", std::move(params)}, {"steps", std::move(steps)}, {"training", std::move(training)}}},
              {"calls", engine_calls(s)}};
}

Hello hello_from_json(const json& reply) {
  const std::string p = "hello";
  Hello h;
  const json& protocol = field(reply, p, "protocol");
  if (!protocol.is_number_integer() || protocol.get<long long>() != kProtocolVersion)
    fail(p + ".protocol", "the adapter speaks protocol " + protocol.dump() + "; this client speaks " + std::to_string(kProtocolVersion));
  const json& adapter = field(reply, p, "adapter");
  auto str = [&](const char* key) {
    const json& v = field(adapter, p + ".adapter", key);
    if (!v.is_string()) fail(p + ".adapter." + key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  };
  h.name = str("name");
  h.version = str("version");
  h.description = str("description");
  h.capabilities = capabilities_from_json(field(reply, p, "capabilities"));
  return h;
}

ReportedResult result_from_json(const json& reply, const Scenario& s) {
  const std::string p = "result";
  const auto& model = s.training.model;
  const auto names = models::parameter_names(model);
  const auto shapes = models::parameter_shapes(model);
  ReportedResult out;
  out.reported = Reports{true, true, true, true};
  auto tensors = [&](const json& j, const std::string& path, bool allow_null, std::vector<bool>* present) {
    if (!j.is_object()) fail(path, "expected an object keyed by parameter name, got " + j.dump().substr(0, 100));
    for (const auto& [key, value] : j.items())
      if (std::find(names.begin(), names.end(), key) == names.end()) fail(path, "unknown parameter '" + key + "'");
    std::vector<models::Matrix<Rational>> ts;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const json& v = field(j, path, names[i].c_str());
      if (v.is_null()) {
        if (!allow_null) fail(path + "." + names[i], "is null; every parameter must be reported");
        ts.push_back(models::Matrix<Rational>::Zero(shapes[i].first, shapes[i].second));
        if (present) present->push_back(false);
        continue;
      }
      ts.push_back(matrix_of(v, path + "." + names[i], shapes[i].first, shapes[i].second));
      if (present) present->push_back(true);
    }
    return ts;
  };
  const json& steps = field(reply, p, "steps");
  if (!steps.is_array() || steps.size() != s.steps.size())
    fail(p + ".steps", "expected one entry per window (" + std::to_string(s.steps.size()) + "), got " + steps.dump().substr(0, 100));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string sp = p + ".steps[" + std::to_string(i) + "]";
    StepOutcome step;
    step.applied = bool_field(steps[i], sp, "applied");
    const json& g = field(steps[i], sp, "gradient");
    if (g.is_null()) {
      out.reported.applied_gradient = false;
      step.gradient = models::zero_gradient<Rational>(model);
    } else {
      step.gradient.tensors = tensors(g, sp + ".gradient", true, &step.gradient.present);
    }
    const json& norm = field(steps[i], sp, "grad_norm");
    if (norm.is_null()) out.reported.grad_norm = false;
    else step.grad_norm = finite_number(norm, sp + ".grad_norm");
    const json& coef = field(steps[i], sp, "clip_coefficient");
    if (coef.is_null()) out.reported.clip_coefficient = false;
    else step.clip_coefficient = finite_number(coef, sp + ".clip_coefficient");
    if (!step.applied) {
      step.gradient = models::zero_gradient<Rational>(model);
      step.grad_norm = Rational(0);
      step.clip_coefficient = Rational(1);
    }
    out.result.steps.push_back(std::move(step));
  }
  out.result.parameters.tensors = tensors(field(reply, p, "parameters"), p + ".parameters", false, nullptr);
  const json& state = field(reply, p, "optimizer_state");
  auto& os = out.result.optimizer_state;
  os = models::initial_optimizer_state<Rational>(model);
  if (state.is_null()) {
    out.reported.optimizer_state = false;
  } else {
    const std::string op = p + ".optimizer_state";
    std::vector<bool> has_first;
    os.first_moment = tensors(field(state, op, "first_moment"), op + ".first_moment", true, &has_first);
    os.has_momentum_buffer = has_first;
    os.second_moment = tensors(field(state, op, "second_moment"), op + ".second_moment", true, nullptr);
    const json& counts = field(state, op, "step_count");
    for (std::size_t i = 0; i < names.size(); ++i)
      os.step_count[i] = int_of(field(counts, op + ".step_count", names[i].c_str()), op + ".step_count." + names[i], 0, 1 << 30);
  }
  out.result.reported = ResultCoverage{out.reported.applied_gradient, out.reported.grad_norm, out.reported.clip_coefficient,
                                       out.reported.optimizer_state};
  return out;
}

}  // namespace accumcheck::sim::external
