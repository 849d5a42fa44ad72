// The messages of the adapter protocol, version 1 (docs/adapter-protocol.md), on the client side: the
// adapter's capabilities, the run request built from a scenario, and the result read back into a RunResult.
//
// Method: every reader validates as it goes and throws ProtocolError naming the JSON path and the value, so
// a misbehaving adapter is reported precisely and never silently misread. Capabilities answer the one
// question the generator, the shrinker and the properties ask: can this adapter run this scenario, and if
// not, why not (unsupported_reason). Nothing here does I/O; adapter_client.h owns the process.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/scenario.h"
#include "sim/target.h"

namespace accumcheck::sim::external {

inline constexpr int kProtocolVersion = 1;

// A reply that breaks the protocol: not JSON, a missing or mistyped field, another request's id, a tensor of
// the wrong shape. The campaign treats it as a target fault, never as a result.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a run computes in: exact rationals (compared by equality) or a float type (compared within the
// derived rounding bound). Maps onto the scalar kinds the properties know.
enum class DType { exact, fp32, fp64 };
std::string_view to_string(DType dtype);
DType dtype_of(ScalarKind scalar);  // rational and fast-rational -> exact; fixed32 is refused (invalid_argument)
ScalarKind scalar_of(DType dtype);  // exact -> rational

struct Reports {
  bool applied_gradient = false, grad_norm = false, clip_coefficient = false, optimizer_state = false;
};

struct Limits {
  int rank_count_max = 1, step_count_max = 1, micro_batch_count_max = 1, token_count_max = 1;
};

// docs/adapter-protocol.md section 2, field by field.
struct Capabilities {
  std::vector<models::ModelKind> models;
  bool experts = false, frozen_parameters = false;
  std::vector<models::LossAggregation> aggregations;
  std::vector<models::OptimizerKind> optimizers;
  bool momentum = false, weight_decay = false, clipping = false;
  std::vector<int> world_sizes, zero_stages;
  std::vector<bool> offload;
  std::vector<DType> dtypes;
  std::vector<Precision> precisions;
  bool loss_scaling = false;
  std::vector<BoundaryMode> boundary;
  std::vector<bool> step_after_every_backward;
  bool uneven_windows = false, checkpoint = false;
  Reports reports;
  bool missing_gradient_is_zero = false;
  Limits limits;
};

// Throws ProtocolError naming the field: missing, mistyped, an unknown name, an empty list, an impossible value.
Capabilities capabilities_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Capabilities& capabilities);

// Empty when the adapter can run the scenario in dtype, else the first reason it cannot, in words that name
// the capability ("the adapter's world_sizes are [1]; the scenario has 2 ranks").
std::string unsupported_reason(const Capabilities& capabilities, const Scenario& scenario, DType dtype);

// The engine calls of a scenario in order (section 3): backward, set_boundary, step, end_window, checkpoint.
nlohmann::json engine_calls(const Scenario& scenario);
// {"type": "hello", "id": 0, "protocol": 1, "client": ...}
nlohmann::json hello_request(const std::string& client);
// {"type": "run", "id": id, "dtype": ..., "scenario": ..., "values": ..., "calls": ...}. The scenario's values
// must be exactly representable in dtype (asserted: the generator only draws such values).
nlohmann::json run_request(std::int64_t id, const Scenario& scenario, DType dtype);

// What the handshake told us.
struct Hello {
  std::string name, version, description;
  Capabilities capabilities;
};
Hello hello_from_json(const nlohmann::json& reply);

// A reply of type "error": kind "unsupported", "failed" or "protocol", with the message (and traceback).
struct ErrorReply {
  std::string kind, message;
};

// Reads a result for `scenario` into a RunResult in exact values (floats are exact rationals). Values the
// adapter does not report come back as absent: `reported` says which.
struct ReportedResult {
  RunResult result;
  Reports reported;  // what this reply actually carried
};
ReportedResult result_from_json(const nlohmann::json& reply, const Scenario& scenario);

}  // namespace accumcheck::sim::external
