// What the adapter protocol costs: the same scenarios run through the protocol (A) and in-process in Python (B).
//
// A: sim::external::AdapterTarget for the shipped torch-loop adapter, dtype fp32: per trial the C++ side
//    validates the scenario, builds run_request and dumps it, the pipe carries the line, the kit decodes and
//    validates it (RunRequest.from_json, capabilities check), torch runs it, the kit encodes the result, the
//    pipe carries it back and C++ parses it (json::parse, result_from_json into exact rationals).
// B: bench/adapter_in_process.py, one long-lived process of the torch environment's python, loads the same run
//    requests from a JSONL file once, decodes them once, and per round times only the adapter's run() per
//    trial (time.perf_counter), with the adapter built by adapters/torch-loop/adapter.py's own main().
// The protocol's cost is time per trial A / time per trial B. Both are timed in one run, interleaved in rounds
// (A then B, then B then A, ...) so that drift on a noisy machine falls on both; the median ratio is reported
// and never asserted (STYLE.md). Before timing, every result of A is checked equal, bit for bit, to B's result
// for the same request: both run the same deterministic torch loop, so they must agree exactly.
// The breakdown times the parts of A that are not torch: the C++ encode and parse in a loop without the
// adapter (on B's replies), and the kit's decode and encode in a serve-like loop that B runs once while
// starting. What is left of A - B after those is the pipes, the process switches and the line I/O.
//
// Scenarios come from a small deterministic maker here (bench/ may not link fuzz/): linear, MLP or tied-
// embedding models of a few units, dyadic values k/4 in [-1, 1] (exact in fp32), 1-3 steps, G = 1-4 on one rank,
// token-mean or sum, SGD or Adam. Each scenario draws from its own stream split off the root seed.
// Small values and learning rates (SGD 1/8 or 1/16, Adam 1/8) keep every run finite in fp32: the tied-embedding
// model is quadratic in its table, and SGD on it diverges fast from larger ones (a grad_norm of inf is a
// protocol fault the client refuses).
//
// Back of envelope (bench/adapter_protocol.sh has the long form): a request is ~4 KB of JSON (the scenario
// twice, as rational strings and as floats, plus the engine calls), a reply ~1.3 KB. JSON text itself is
// cheap (C and C++ codecs at ~50-200 MB/s: ~20-80 us a side); building the request through nlohmann and GMP
// and the kit's pure-Python validation of every number (a Fraction each) cost more, ~0.3 ms and ~1 ms; a
// pipe round trip with two context switches is ~20-50 us when idle. torch's run builds a model and an
// optimizer and does a few tiny forward/backward/step passes at ~5-20 us per op: ~2-5 ms. Expected: ~1.4-1.8x.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "sim/external/adapter_process.h"
#include "sim/external/adapter_protocol.h"
#include "sim/external/adapter_target.h"
#include "sim/scenario.h"

namespace {

using namespace accumcheck;
using models::Rational;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kScenarioCountMax = 100000;
constexpr int kRoundCountMax = 50;

// ------------------------------------------------------------------------------------------ the scenarios

// SplitMix64: one root seed, one independent stream per scenario (split by index), no global state.
struct Stream {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  Stream split(std::uint64_t index) const { return Stream{Stream{state ^ (index * 0xD1B54A32D192ED03ULL)}.next()}; }
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }  // [lo, hi]
  bool chance(int one_in) { return next() % static_cast<std::uint64_t>(one_in) == 0; }
  Rational dyadic() { return Rational(static_cast<long long>(uniform(-4, 4)), 4LL); }  // k/4 in [-1, 1], exact in fp32
};

models::ModelSpec draw_model(Stream& rng) {
  switch (rng.uniform(0, 2)) {
    case 0: return models::ModelSpec{.kind = models::ModelKind::linear, .input_size = rng.uniform(1, 4), .output_size = rng.uniform(1, 3)};
    case 1:
      return models::ModelSpec{.kind = models::ModelKind::mlp, .input_size = rng.uniform(1, 4), .output_size = rng.uniform(1, 3),
                               .hidden_size = rng.uniform(1, 4)};
    default: return models::ModelSpec{.kind = models::ModelKind::tied_embedding, .vocab_size = rng.uniform(2, 6), .embed_size = rng.uniform(1, 3)};
  }
}

models::Sequence<Rational> draw_sequence(Stream& rng, const models::ModelSpec& spec) {
  const int token_count = rng.chance(8) ? 0 : rng.uniform(1, 4);  // an empty sequence now and then
  models::Sequence<Rational> seq;
  seq.features = models::Matrix<Rational>(token_count, models::feature_size(spec));
  seq.targets = models::Matrix<Rational>(token_count, models::target_size(spec));
  for (Eigen::Index i = 0; i < seq.features.size(); ++i) seq.features(i) = rng.dyadic();
  for (Eigen::Index i = 0; i < seq.targets.size(); ++i) seq.targets(i) = rng.dyadic();
  if (spec.kind == models::ModelKind::tied_embedding)
    for (int t = 0; t < token_count; ++t) seq.token_ids.push_back(rng.uniform(0, spec.vocab_size - 1));
  for (int t = 0; t < token_count; ++t) seq.loss_mask.push_back(rng.chance(8) ? 0 : 1);
  return seq;
}

// One valid scenario inside torch-loop's capabilities: one rank, ZeRO 0, no offload, full precision, the
// automatic boundary with step() after every backward (windows of exactly G).
sim::Scenario make_scenario(Stream rng) {
  sim::Scenario s;
  s.training.model = draw_model(rng);
  s.training.aggregation.mode = rng.chance(2) ? models::LossAggregation::token_mean : models::LossAggregation::sum;
  if (rng.chance(2)) {
    s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::sgd, .lr = Rational(1LL, rng.chance(2) ? 8LL : 16LL)};
  } else {
    s.training.optimizer = models::OptimizerSpec{.kind = models::OptimizerKind::adam, .lr = Rational(1LL, 8LL), .beta1 = Rational(1LL, 2LL),
                                                 .beta2 = Rational(3LL, 4LL), .eps = Rational(1LL, 8LL)};
  }
  s.engine = sim::EngineConfig{.rank_count = 1, .accumulation_steps = rng.uniform(1, 4)};
  s.initial_parameters = models::zero_parameters<Rational>(s.training.model);
  for (auto& t : s.initial_parameters.tensors)
    for (Eigen::Index i = 0; i < t.size(); ++i) t(i) = rng.dyadic();
  const int step_count = rng.uniform(1, 3);
  for (int st = 0; st < step_count; ++st) {
    sim::StepPlan plan;
    for (int k = 0; k < s.engine.accumulation_steps; ++k) {
      sim::MicroBatch mb;
      std::vector<models::Sequence<Rational>> seqs;
      const int sequence_count = rng.uniform(1, 3);
      for (int i = 0; i < sequence_count; ++i) seqs.push_back(draw_sequence(rng, s.training.model));
      mb.rank_sequences.push_back(std::move(seqs));
      plan.micro_batches.push_back(std::move(mb));
    }
    s.steps.push_back(std::move(plan));
  }
  s.schedule_seed = rng.next();
  sim::validate(s);
  return s;
}

// ------------------------------------------------------------------------------------------ helpers

struct Options {
  int scenario_count = 500;
  int round_count = 5;
  std::uint64_t seed = 1;
  int warmup_count = 20;  // B's untimed runs per invocation (A is warmed by the correctness pass)
  std::filesystem::path work_dir;
  std::filesystem::path python;  // the torch environment's interpreter
  std::filesystem::path script = ACCUMCHECK_BENCH_DIR "/adapter_in_process.py";
};

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "adapter_protocol_bench: " << what << "\n"
            << "usage: adapter_protocol_bench [--scenarios N] [--rounds R] [--seed S] [--warmup W] [--work-dir DIR] [--python PATH]\n";
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  const char* venv = std::getenv("ACCUMCHECK_VENV_DIR");  // the same rule as sim/external's venv_dir()
  o.python = std::filesystem::path(venv && *venv ? venv : ACCUMCHECK_SOURCE_DIR "/.venv") / "torch" / "bin" / "python";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    auto integer = [&](int lo, int hi) {
      const std::string v = value();
      try {
        const long long n = std::stoll(v);
        if (n < lo || n > hi) throw std::out_of_range(v);
        return static_cast<int>(n);
      } catch (const std::exception&) {
        usage_error(arg + " " + v + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
    };
    if (arg == "--scenarios") o.scenario_count = integer(1, kScenarioCountMax);
    else if (arg == "--rounds") o.round_count = integer(1, kRoundCountMax);
    else if (arg == "--warmup") o.warmup_count = integer(0, kScenarioCountMax);
    else if (arg == "--seed") o.seed = std::stoull(value());
    else if (arg == "--work-dir") o.work_dir = value();
    else if (arg == "--python") o.python = value();
    else usage_error("unknown argument " + arg);
  }
  if (o.work_dir.empty()) o.work_dir = std::filesystem::temp_directory_path() / ("accumcheck-adapter-bench-" + std::to_string(o.seed));
  return o;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Side B: bench/adapter_in_process.py as one long-lived process (sim::external::AdapterProcess, lines only),
// asked for one timed pass over every request per round.
class InProcess {
 public:
  InProcess(const Options& o, const std::filesystem::path& requests, const std::filesystem::path& adapter_py,
            const std::filesystem::path& replies)
      : process_(sim::external::ProcessSpec{.argv = {o.python.string(), o.script.string(), "--requests", requests.string(), "--adapter",
                                                     adapter_py.string(), "--warmup", std::to_string(o.warmup_count), "--breakdown",
                                                     "--replies", replies.string()}}) {
    ready_ = read_json(std::chrono::minutes(10), "its ready line");
  }
  ~InProcess() { process_.terminate(std::chrono::milliseconds(2000)); }

  // The breakdown the script measured while getting ready.
  const json& ready() const { return ready_; }
  // Seconds of adapter.run() summed over one pass.
  double run_pass() {
    if (!process_.write_line("run", std::chrono::seconds(10))) fail("could not ask for a pass");
    return read_json(std::chrono::minutes(10), "a pass").at("run_s").get<double>();
  }

 private:
  json read_json(std::chrono::milliseconds deadline, const std::string& what) {
    const auto r = process_.read_line(deadline);
    if (r.status != sim::external::ReadStatus::line) fail("no line for " + what + " (" + process_.exit_description() + ")");
    try {
      return json::parse(r.line);
    } catch (const json::parse_error& e) {
      fail("its line for " + what + " is not JSON (" + e.what() + "): " + r.line.substr(0, 200));
    }
  }
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("the in-process side (" + process_.command() + "): " + what + "\nits stderr: " + process_.stderr_tail());
  }

  sim::external::AdapterProcess process_;
  json ready_;
};

// Exact equality of everything a result reports; the first difference in words, or empty.
std::string first_difference(const sim::RunResult& a, const sim::RunResult& b) {
  if (a.steps.size() != b.steps.size()) return "step counts differ";
  for (std::size_t s = 0; s < a.steps.size(); ++s) {
    const auto &x = a.steps[s], &y = b.steps[s];
    if (x.applied != y.applied) return "step " + std::to_string(s) + ": applied differs";
    if (x.gradient.present != y.gradient.present || !models::tensor_lists_equal(x.gradient.tensors, y.gradient.tensors))
      return "step " + std::to_string(s) + ": applied gradient differs";
    if (x.grad_norm != y.grad_norm) return "step " + std::to_string(s) + ": grad_norm " + x.grad_norm.to_string() + " vs " + y.grad_norm.to_string();
    if (x.clip_coefficient != y.clip_coefficient) return "step " + std::to_string(s) + ": clip_coefficient differs";
  }
  if (!models::tensor_lists_equal(a.parameters.tensors, b.parameters.tensors)) return "final parameters differ";
  if (!(a.optimizer_state == b.optimizer_state)) return "optimizer state differs";
  return {};
}

int run_bench(const Options& o) {
  std::printf("adapter_protocol_bench: seed %llu, %d scenarios, %d rounds (replay: adapter_protocol_bench --seed %llu --scenarios %d --rounds %d)\n",
              static_cast<unsigned long long>(o.seed), o.scenario_count, o.round_count, static_cast<unsigned long long>(o.seed),
              o.scenario_count, o.round_count);
  if (!std::filesystem::exists(o.python)) {
    std::printf("SKIP: %s is absent: run scripts/adapters-env.sh\n", o.python.string().c_str());
    return 0;
  }
  sim::external::AdapterSpec spec;
  try {
    spec = sim::external::find_adapter_spec("torch-loop");
  } catch (const std::invalid_argument& e) {
    std::printf("SKIP: %s\n", e.what());
    return 0;
  }
  spec.dtype = sim::external::DType::fp32;
  const auto adapter_py = sim::external::adapters_dir() / "torch-loop" / "adapter.py";
  const sim::external::AdapterTarget target(spec);

  // The scenarios, and their run requests as the client sends them.
  const Stream root{o.seed};
  std::vector<sim::Scenario> scenarios;
  for (int i = 0; i < o.scenario_count; ++i) {
    scenarios.push_back(make_scenario(root.split(static_cast<std::uint64_t>(i))));
    if (const std::string why = target.unsupported(scenarios.back()); !why.empty()) {
      std::fprintf(stderr, "adapter_protocol_bench: scenario %d (seed %llu) is outside torch-loop's capabilities: %s\n", i,
                   static_cast<unsigned long long>(o.seed), why.c_str());
      return 1;
    }
  }
  std::filesystem::create_directories(o.work_dir);
  const auto requests_path = o.work_dir / "requests.jsonl";
  const auto replies_path = o.work_dir / "replies.jsonl";
  double request_bytes = 0;
  {
    std::ofstream out(requests_path);
    for (int i = 0; i < o.scenario_count; ++i) {
      const std::string line = sim::external::run_request(i + 1, scenarios[static_cast<std::size_t>(i)], sim::external::DType::fp32).dump();
      request_bytes += static_cast<double>(line.size() + 1);
      out << line << '\n';
    }
    if (!out) throw std::runtime_error("could not write " + requests_path.string());
  }

  // Correctness once, before timing: A's results equal B's, bit for bit. It also warms A's adapter process.
  InProcess in_process(o, requests_path, adapter_py, replies_path);
  const json& breakdown = in_process.ready();
  std::vector<std::string> replies;
  {
    std::ifstream in(replies_path);
    for (std::string line; std::getline(in, line);) replies.push_back(line);
  }
  if (replies.size() != scenarios.size()) {
    std::fprintf(stderr, "adapter_protocol_bench: %s holds %zu replies for %zu requests\n", replies_path.string().c_str(), replies.size(),
                 scenarios.size());
    return 1;
  }
  double reply_bytes = 0;
  const sim::RunOptions run_options{.scalar = sim::ScalarKind::fp32};
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    reply_bytes += static_cast<double>(replies[i].size() + 1);
    sim::RunResult a;
    try {
      a = target.run(scenarios[i], run_options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "adapter_protocol_bench: scenario %zu failed through the protocol: %s\n  replay: adapter_protocol_bench --seed %llu --scenarios %zu\n",
                   i, e.what(), static_cast<unsigned long long>(o.seed), i + 1);
      return 1;
    }
    const sim::RunResult b = sim::external::result_from_json(json::parse(replies[i]), scenarios[i]).result;
    if (const std::string diff = first_difference(a, b); !diff.empty()) {
      std::fprintf(stderr,
                   "adapter_protocol_bench: scenario %zu: the protocol's result differs from the in-process one: %s\n"
                   "  replay: adapter_protocol_bench --seed %llu --scenarios %zu (request line %zu of %s)\n"
                   "  hint: both run the same deterministic torch loop; a difference is a decoding or encoding loss\n",
                   i, diff.c_str(), static_cast<unsigned long long>(o.seed), i + 1, i + 1, requests_path.string().c_str());
      return 1;
    }
  }

  // C++ side of the breakdown, without the adapter: what A does per trial besides waiting for the pipe.
  const double n = static_cast<double>(scenarios.size());
  double check_s = 1e300, build_s = 1e300, dump_s = 1e300, parse_s = 1e300;
  std::size_t sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (const auto& s : scenarios) {
      sim::validate(s);
      sink += target.unsupported(s).size();
    }
    check_s = std::min(check_s, seconds_since(t0));
    std::vector<json> built;
    t0 = Clock::now();
    for (std::size_t i = 0; i < scenarios.size(); ++i)
      built.push_back(sim::external::run_request(static_cast<std::int64_t>(i + 1), scenarios[i], sim::external::DType::fp32));
    build_s = std::min(build_s, seconds_since(t0));
    t0 = Clock::now();
    for (const auto& j : built) sink += j.dump().size();
    dump_s = std::min(dump_s, seconds_since(t0));
    t0 = Clock::now();
    for (std::size_t i = 0; i < scenarios.size(); ++i)
      sink += sim::external::result_from_json(json::parse(replies[i]), scenarios[i]).result.steps.size();
    parse_s = std::min(parse_s, seconds_since(t0));
  }
  if (sink == 0) std::printf("(unreachable)\n");

  // The rounds: A then B, B then A, ... Times per trial in seconds.
  std::vector<double> a_times, b_times, ratios;
  for (int r = 0; r < o.round_count; ++r) {
    double a_s = 0, b_s = 0;
    auto time_a = [&] {
      const auto t0 = Clock::now();
      for (const auto& s : scenarios) (void)target.run(s, run_options);
      a_s = seconds_since(t0) / n;
    };
    auto time_b = [&] { b_s = in_process.run_pass() / n; };
    if (r % 2 == 0) time_a(), time_b();
    else time_b(), time_a();
    a_times.push_back(a_s);
    b_times.push_back(b_s);
    ratios.push_back(a_s / b_s);
  }

  const double py_loads = breakdown.at("loads_s").get<double>() / n, py_decode = breakdown.at("decode_s").get<double>() / n,
               py_check = breakdown.at("check_s").get<double>() / n, py_encode = breakdown.at("encode_s").get<double>() / n,
               py_run_in_loop = breakdown.at("run_in_loop_s").get<double>() / n;
  std::printf("\nmean bytes per trial: request %.0f, reply %.0f; all %zu results equal bit for bit through both paths\n\n",
              request_bytes / n, reply_bytes / n, scenarios.size());
  std::printf("%-6s %14s %14s %12s %12s %8s\n", "round", "A protocol/s", "B in-proc/s", "A us/trial", "B us/trial", "A/B");
  for (int r = 0; r < o.round_count; ++r)
    std::printf("%-6d %14.1f %14.1f %12.1f %12.1f %8.3f\n", r, 1 / a_times[r], 1 / b_times[r], a_times[r] * 1e6, b_times[r] * 1e6, ratios[r]);
  const double a_med = median(a_times), b_med = median(b_times), ratio = median(ratios);
  std::printf("%-6s %14.1f %14.1f %12.1f %12.1f %8.3f\n", "median", 1 / a_med, 1 / b_med, a_med * 1e6, b_med * 1e6, ratio);
  std::printf("\nbreakdown, us per trial (A - B = %.1f):\n", (a_med - b_med) * 1e6);
  std::printf("  C++ validate + unsupported                        %8.1f\n", check_s / n * 1e6);
  std::printf("  C++ run_request (scenario to json)                %8.1f\n", build_s / n * 1e6);
  std::printf("  C++ json::dump                                    %8.1f\n", dump_s / n * 1e6);
  std::printf("  C++ json::parse + result_from_json                %8.1f\n", parse_s / n * 1e6);
  std::printf("  Python json.loads of the request                  %8.1f\n", py_loads * 1e6);
  std::printf("  Python RunRequest.from_json                       %8.1f\n", py_decode * 1e6);
  std::printf("  Python capabilities().check                       %8.1f\n", py_check * 1e6);
  std::printf("  Python result.to_json + json.dumps                %8.1f\n", py_encode * 1e6);
  const double explained = (check_s + build_s + dump_s + parse_s) / n + py_loads + py_decode + py_check + py_encode;
  std::printf("  rest: pipes, switches, line I/O (A-B minus above) %8.1f\n", (a_med - b_med - explained) * 1e6);
  std::printf("  (Python run() between that JSON work, no pipe: %.1f us per trial; B's run() alone: %.1f)\n", py_run_in_loop * 1e6,
              b_med * 1e6);
  std::printf("\nprotocol cost (median A/B time per trial): %.3fx; the issue's budget is 2x: %s\n", ratio, ratio <= 2.0 ? "within" : "OVER");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    const int status = run_bench(options);
    sim::external::shutdown_adapters();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adapter_protocol_bench: %s\n", e.what());
    return 1;
  }
}
