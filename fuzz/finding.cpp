// Finding files: JSON form and atomic writes.
#include "fuzz/finding.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "sim/json/scenario_json.h"
#include "models/json/json_reader.h"
#include "models/json/model_spec_json.h"

namespace accumcheck::fuzz {

using nlohmann::json;

using models::json::fail;
using models::json::field;

namespace {
std::string string_field(const json& j, const std::string& path, const char* key) {
  return models::json::string_of(field(j, path, key), path + "." + key);
}
std::uint64_t u64_field(const json& j, const std::string& path, const char* key) {
  return models::json::u64_of(field(j, path, key), path + "." + key);
}
properties::Outcome parse_outcome(const std::string& text, const std::string& path) {
  try {
    return outcome_from_string(text);
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
}
}  // namespace

properties::Outcome outcome_from_string(const std::string& text) {
  for (auto o : {properties::Outcome::pass, properties::Outcome::fail, properties::Outcome::cannot_run, properties::Outcome::target_fault})
    if (properties::to_string(o) == text) return o;
  throw std::invalid_argument("unknown outcome '" + text + "' (expected pass, fail, cannot-run or target-fault)");
}

json to_json(const properties::Verdict& v) {
  json mismatches = json::array();
  for (const auto& m : v.mismatches) {
    json entry{{"where", m.where},
               {"expected", m.expected.to_string()},
               {"actual", m.actual.to_string()},
               {"expected_float", m.expected.to_double()},
               {"actual_float", m.actual.to_double()}};
    // Float targets: the rounding bound the difference exceeds.
    if (!m.tolerance.is_zero()) entry["tolerance"] = m.tolerance.to_string();
    mismatches.push_back(std::move(entry));
  }
  json membership = nullptr;
  if (v.membership) {
    json wrong = json::array();
    for (const auto& w : v.membership->wrong)
      wrong.push_back({{"applied_in_step", w.applied_in_step},
                       {"step", w.micro_batch.step},
                       {"micro_batch", w.micro_batch.micro_batch},
                       {"rank", w.micro_batch.rank},
                       {"multiplicity", w.multiplicity.to_string()}});
    membership = json{{"summary", v.membership->summary}, {"wrong", std::move(wrong)}};
  }
  json out{{"outcome", std::string(properties::to_string(v.outcome))},
           {"message", v.message},
           {"mismatches", std::move(mismatches)},
           {"membership", std::move(membership)}};
  if (!v.rounding.gap.is_zero())
    out["rounding_gap"] = json{{"gap", v.rounding.gap.to_string()}, {"bound", v.rounding.bound.to_string()}, {"where", v.rounding.where}};
  return out;
}

json to_json(const Finding& f) {
  return json{{"format", kFindingFormat},
              {"version", kFindingVersion},
              {"target", f.target},
              {"property", f.property},
              {"scalar", std::string(sim::to_string(f.scalar))},
              {"campaign_seed", std::to_string(f.campaign_seed)},
              {"trial", f.trial},
              {"trial_seed", std::to_string(f.trial_seed)},
              {"scenario", to_json(f.scenario)},
              {"original_size", f.original_size},
              {"shrunk_size", f.shrunk_size},
              {"shrink", {{"attempts", f.shrink_attempts}, {"accepted", f.shrink_accepted}}},
              {"verdict", to_json(f.verdict)},
              {"adapter", f.adapter ? *f.adapter : json(nullptr)},
              {"replay", replay_command(f)},
              {"accumcheck", f.made_by}};
}

namespace {
Finding finding_from_json_unchecked(const json& j);
}  // namespace

// A field of the wrong type deep inside (a string where a count belongs) is an input error naming the finding,
// never a JSON library's exception.
Finding finding_from_json(const json& j) {
  try {
    return finding_from_json_unchecked(j);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("finding: a field has the wrong type or value (") + e.what() + ")");
  }
}

namespace {
Finding finding_from_json_unchecked(const json& j) {
  const std::string p = "finding";
  if (!j.is_object()) fail(p, "expected an object");
  if (string_field(j, p, "format") != kFindingFormat)
    fail(p + ".format", "expected \"" + std::string(kFindingFormat) + "\": this is not an accumcheck finding file");
  const json& version = field(j, p, "version");
  if (!version.is_number_integer() || version.get<int>() != kFindingVersion)
    fail(p + ".version", "unsupported version " + version.dump() + " (this accumcheck reads version " +
                             std::to_string(kFindingVersion) + ")");
  Finding f;
  f.target = string_field(j, p, "target");
  f.property = string_field(j, p, "property");
  try {
    f.scalar = sim::parse_scalar_kind(string_field(j, p, "scalar"));
  } catch (const std::invalid_argument& e) {
    fail(p + ".scalar", e.what());
  }
  f.campaign_seed = u64_field(j, p, "campaign_seed");
  const json& trial = field(j, p, "trial");
  if (!trial.is_number_integer()) fail(p + ".trial", "expected an integer");
  f.trial = trial.get<std::int64_t>();
  f.trial_seed = u64_field(j, p, "trial_seed");
  f.scenario = sim::scenario_from_json(field(j, p, "scenario"));
  if (j.contains("original_size") && j.at("original_size").is_number_unsigned()) f.original_size = j.at("original_size").get<std::size_t>();
  if (j.contains("shrunk_size") && j.at("shrunk_size").is_number_unsigned()) f.shrunk_size = j.at("shrunk_size").get<std::size_t>();
  if (j.contains("shrink") && j.at("shrink").is_object()) {
    f.shrink_attempts = j.at("shrink").value("attempts", std::size_t{0});
    f.shrink_accepted = j.at("shrink").value("accepted", std::size_t{0});
  }
  const json& v = field(j, p, "verdict");
  f.verdict.outcome = parse_outcome(string_field(v, p + ".verdict", "outcome"), p + ".verdict.outcome");
  f.verdict.message = string_field(v, p + ".verdict", "message");
  const json& mismatches = field(v, p + ".verdict", "mismatches");
  if (!mismatches.is_array()) fail(p + ".verdict.mismatches", "expected an array");
  for (std::size_t i = 0; i < mismatches.size(); ++i) {
    const std::string mp = p + ".verdict.mismatches[" + std::to_string(i) + "]";
    f.verdict.mismatches.push_back({string_field(mismatches[i], mp, "where"),
                                    models::json::rational_from_json(field(mismatches[i], mp, "expected"), mp + ".expected"),
                                    models::json::rational_from_json(field(mismatches[i], mp, "actual"), mp + ".actual")});
    if (mismatches[i].contains("tolerance"))
      f.verdict.mismatches.back().tolerance =
          models::json::rational_from_json(mismatches[i].at("tolerance"), mp + ".tolerance");
  }
  if (v.contains("rounding_gap") && v.at("rounding_gap").is_object()) {
    const json& g = v.at("rounding_gap");
    const std::string gp = p + ".verdict.rounding_gap";
    f.verdict.rounding.gap = models::json::rational_from_json(field(g, gp, "gap"), gp + ".gap");
    f.verdict.rounding.bound = models::json::rational_from_json(field(g, gp, "bound"), gp + ".bound");
    f.verdict.rounding.where = string_field(g, gp, "where");
  }
  if (j.contains("accumcheck")) {
    if (!j.at("accumcheck").is_object() && !j.at("accumcheck").is_null())
      fail(p + ".accumcheck", "expected null or {\"version\", \"commit\", \"argv\"}");
    f.made_by = j.at("accumcheck");
  }
  if (j.contains("adapter") && !j.at("adapter").is_null()) {
    const json& a = j.at("adapter");
    if (!a.is_object()) fail(p + ".adapter", "expected an object or null");
    for (const char* key : {"name", "command", "working_directory"}) string_field(a, p + ".adapter", key);
    if (a.contains("model")) string_field(a, p + ".adapter", "model");
    f.adapter = a;
  }
  if (v.contains("membership") && !v.at("membership").is_null()) {
    const json& m = v.at("membership");
    properties::MembershipReport report;
    report.summary = string_field(m, p + ".verdict.membership", "summary");
    for (const auto& w : field(m, p + ".verdict.membership", "wrong"))
      report.wrong.push_back({w.value("applied_in_step", 0),
                              {w.value("step", 0), w.value("micro_batch", 0), w.value("rank", 0)},
                              models::json::rational_from_json(w.value("multiplicity", json("0")), p + ".verdict.membership.wrong")});
    f.verdict.membership = std::move(report);
  }
  return f;
}
}  // namespace

void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    const std::string kind = std::filesystem::is_symlink(status)     ? "symbolic link"
                             : std::filesystem::is_directory(status) ? "folder"
                             : std::filesystem::is_character_file(status) || std::filesystem::is_block_file(status) ? "device"
                                                                                                                    : "special file";
    throw std::invalid_argument(path.string() + " exists and is a " + kind +
                                ", not a regular file: accumcheck writes only to a new path or over a regular file");
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(dir);
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  // On any failure the temporary file goes, so that a full disk leaves no half-written file behind.
  auto fail = [&](const std::string& what, int error, bool open) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot " + what + " " + path.string() + ": " + std::strerror(error));
  };
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno, true);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("sync", errno, true);
  if (::close(fd) != 0) fail("close", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename a temporary file to", errno, false);
}

void write_json_atomically(const std::filesystem::path& path, const json& j) { write_text_atomically(path, j.dump(2) + "\n"); }

json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot open " + path.string() + ": no such file or not readable");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    // Also a number the parser cannot hold (1e400 is out_of_range, not parse_error).
    throw std::invalid_argument(path.string() + " is not valid JSON: " + e.what());
  }
}

std::uint64_t finding_content_digest(const Finding& f) {
  // What a seed determines: not the record of what made it, nor the replay line (they vary with the command).
  const std::string text = json{{"target", f.target},
                                {"property", f.property},
                                {"scalar", std::string(sim::to_string(f.scalar))},
                                {"campaign_seed", std::to_string(f.campaign_seed)},
                                {"trial", f.trial},
                                {"scenario", sim::to_json(f.scenario)},
                                {"verdict", to_json(f.verdict)}}
                               .dump();
  std::uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

std::string finding_file_name(const Finding& f) {
  std::string name = f.target + "--" + f.property + "--s" + std::to_string(f.campaign_seed) + "-" +
                     (f.trial >= 0 ? "t" + std::to_string(f.trial) : std::string("corpus")) + "-" +
                     fmt::format("{:08x}", finding_content_digest(f) >> 32) + ".json";
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == '@')) c = '_';
  return name;
}

std::filesystem::path write_finding(const std::filesystem::path& dir, const Finding& f) {
  const std::string name = finding_file_name(f);
  const std::string stem = name.substr(0, name.size() - 5);
  for (int n = 1;; ++n) {
    const std::filesystem::path path = dir / (n == 1 ? name : stem + "-" + std::to_string(n) + ".json");
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      json j = to_json(f);
      j["replay"] = replay_program() + " replay " + path.string();  // as written, from the folder the campaign ran in
      write_json_atomically(path, j);
      return path;
    }
    // The same finding again (a resumed or repeated campaign): keep the file. Anything else is never overwritten.
    try {
      if (finding_content_digest(finding_from_json(read_json_file(path))) == finding_content_digest(f)) return path;
    } catch (const std::invalid_argument&) {
    }
  }
}

namespace {
std::string& replay_program_storage() {
  static std::string program = "accumcheck";
  return program;
}
}  // namespace

void set_replay_program(std::string program) { replay_program_storage() = std::move(program); }
const std::string& replay_program() { return replay_program_storage(); }
std::string replay_command(const Finding& f) { return replay_program() + " replay " + finding_file_name(f); }

}  // namespace accumcheck::fuzz
