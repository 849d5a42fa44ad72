// A seeded mutation fuzz of the command's readers: finding files (fuzz/finding.h) and campaign state files
// (fuzz/campaign.h). Each mutant of a corpus finding is read, and when it reads, explained, exported as markdown
// and checked as `replay` checks it; each mutant of a state file is resumed from. Every step must either work or
// refuse with std::invalid_argument (the command's exit 2, with a message); any other exception is a defect, and
// under the asan preset so is every memory error. CTest runs a short version; docs/fuzzing.md gives the long one.
//
// Usage: surface_mutation_test CORPUS_DIR FINDING_MUTANTS STATE_MUTANTS [SEED]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fuzz/campaign.h"
#include "surface/explain.h"
#include "fuzz/finding.h"
#include "surface/reproducer.h"
#include "properties/property.h"
#include "sim/schedule.h"
#include "sim/target.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace accumcheck;

namespace {

// sim::Stream (SplitMix64): the same mutants on every platform for the same seed. below(0) is 0 (an empty text).
struct Rng {
  sim::Stream stream;
  std::size_t below(std::size_t n) { return n == 0 ? 0 : stream.below(static_cast<std::uint32_t>(n)); }
};

const std::vector<std::string> kTokens = {"null", "-1", "0", "1e400", "-1e400", "\"x\"", "[]", "{}", "18446744073709551616",
                                          "-9223372036854775809", "0.5", "true", "\"1/0\"", "\"-3/0\"", "\"99999999999999999999999/7\"",
                                          "[[1]]", "\"\"", "1000000000"};

// Every node of a JSON document, by JSON pointer.
void pointers(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) pointers(v, at / k, out);
  else if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) pointers(j[i], at / i, out);
}

// One mutant: a structural edit of the document (a node replaced, removed, or an array resized), or a byte edit.
std::string mutate(const json& doc, const std::string& text, Rng& rng) {
  switch (rng.below(4)) {
    case 0: {  // replace a node with a token
      json j = doc;
      std::vector<json::json_pointer> ps;
      pointers(j, json::json_pointer(), ps);
      const auto& p = ps[rng.below(ps.size())];
      try {
        j[p] = json::parse(kTokens[rng.below(kTokens.size())]);
      } catch (const json::exception&) {
        return text;  // 1e400 does not parse as a value: then as text below
      }
      return j.dump();
    }
    case 1: {  // remove a node
      json j = doc;
      std::vector<json::json_pointer> ps;
      pointers(j, json::json_pointer(), ps);
      const auto& p = ps[rng.below(ps.size())];
      if (p.empty()) return "";
      json& parent = j[p.parent_pointer()];
      if (parent.is_object()) parent.erase(p.back());
      else if (parent.is_array()) parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(std::stoul(p.back())));
      return j.dump();
    }
    case 2: {  // a token spliced into the text
      std::string t = text;
      const std::size_t at = rng.below(t.size());
      const std::size_t len = rng.below(8);
      t.replace(at, std::min(len, t.size() - at), kTokens[rng.below(kTokens.size())]);
      return t;
    }
    default: {  // byte flips and a cut
      std::string t = text;
      for (std::size_t n = 1 + rng.below(3); n > 0; --n) t[rng.below(t.size())] ^= static_cast<char>(1 + rng.below(255));
      if (rng.below(4) == 0) t.resize(rng.below(t.size()));
      return t;
    }
  }
}

struct Tally {
  std::size_t worked = 0, refused = 0, defects = 0;
  std::map<std::string, std::size_t> defect_messages;
  void defect(const std::string& what) {
    ++defects;
    if (defect_messages.size() < 20) ++defect_messages[what.substr(0, 300)];
  }
};

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What `replay`, `explain` and `export` do with a file; every failure must be std::invalid_argument.
void use_finding(const fs::path& file, Tally& tally) {
  try {
    const fuzz::Finding f = fuzz::finding_from_json(fuzz::read_json_file(file));
    (void)surface::explain(f);
    (void)surface::export_finding(f, surface::ExportFormat::markdown);
    const auto target = sim::make_target(f.target);
    if (const auto* property = properties::find_property(f.property))
      (void)fuzz::check_pair(*target, *property, f.scenario, f.scalar);
    ++tally.worked;
  } catch (const std::invalid_argument&) {
    ++tally.refused;
  } catch (const sim::TargetFault& e) {
    tally.defect(std::string("TargetFault: ") + e.what());
  } catch (const std::exception& e) {
    tally.defect(std::string("exception: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR FINDING_MUTANTS STATE_MUTANTS [SEED]\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const std::size_t finding_mutants = std::stoul(argv[2]), state_mutants = std::stoul(argv[3]);
  Rng rng{sim::Stream(argc > 4 ? std::stoull(argv[4]) : 20261201ULL)};
  const fs::path work = fs::temp_directory_path() / ("accumcheck-mutation-" + std::to_string(::getpid()));
  fs::create_directories(work);

  std::vector<std::pair<json, std::string>> seeds;
  for (const auto& entry : fs::directory_iterator(corpus))
    if (entry.path().extension() == ".json") {
      const std::string text = read_file(entry.path());
      seeds.emplace_back(json::parse(text), text);
    }
  if (seeds.empty()) {
    std::fprintf(stderr, "no finding files in %s\n", corpus.c_str());
    return 2;
  }
  std::sort(seeds.begin(), seeds.end(), [](const auto& a, const auto& b) { return a.second < b.second; });

  Tally findings;
  for (std::size_t i = 0; i < finding_mutants; ++i) {
    const auto& [doc, text] = seeds[rng.below(seeds.size())];
    write_file(work / "mutant.json", mutate(doc, text, rng));
    use_finding(work / "mutant.json", findings);
  }

  // State files: a campaign's state after one chunk, mutated, then resumed from (with no trial left to run, so
  // that only reading it is exercised).
  Tally states;
  fuzz::CampaignConfig c;
  c.targets = {"reference", "deepspeed@0.16.0"};
  c.properties = {"accumulated_update_equals_full_batch_update"};
  c.seed = 1;
  c.trials = 64;
  c.findings_dir = work / "findings";
  c.state_path = work / "state.json";
  fs::remove(*c.state_path);
  fuzz::run_campaign(c);
  const std::string state_text = read_file(*c.state_path);
  const json state_doc = json::parse(state_text);
  for (std::size_t i = 0; i < state_mutants; ++i) {
    write_file(*c.state_path, mutate(state_doc, state_text, rng));
    try {
      (void)fuzz::run_campaign(c);
      ++states.worked;
    } catch (const std::invalid_argument&) {
      ++states.refused;
    } catch (const std::exception& e) {
      states.defect(std::string("exception: ") + e.what());
    }
  }
  fs::remove_all(work);

  std::printf("finding mutants: %zu read and used, %zu refused with a message, %zu defects\n", findings.worked, findings.refused,
              findings.defects);
  std::printf("state mutants: %zu resumed, %zu refused with a message, %zu defects\n", states.worked, states.refused, states.defects);
  for (const auto* t : {&findings, &states})
    for (const auto& [what, n] : t->defect_messages) std::printf("DEFECT (%zux): %s\n", n, what.c_str());
  return findings.defects + states.defects == 0 ? 0 : 1;
}
