// Small helpers for reading JSON with errors that name the JSON path of the first problem, shared by every
// reader in accumcheck (model spec, scenario, finding, campaign state). Each throws std::invalid_argument
// with the message "JSON <path>: <what>".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace accumcheck::models::json {

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("JSON " + path + ": " + what);
}

// The field `key` of object j at `path`; a missing field or a non-object is an error.
inline const nlohmann::json& field(const nlohmann::json& j, const std::string& path, const char* key) {
  if (!j.is_object()) fail(path, "expected an object");
  const auto it = j.find(key);
  if (it == j.end()) fail(path, std::string("missing field '") + key + "'");
  return *it;
}

// An integer in [-limit, limit].
inline int int_of(const nlohmann::json& j, const std::string& path, long long limit = 1000000000LL) {
  if (!j.is_number_integer()) fail(path, "expected an integer, got " + j.dump());
  const auto v = j.get<long long>();
  if (v < -limit || v > limit) fail(path, "integer " + std::to_string(v) + " out of range");
  return static_cast<int>(v);
}

inline bool bool_of(const nlohmann::json& j, const std::string& path) {
  if (!j.is_boolean()) fail(path, "expected true or false, got " + j.dump());
  return j.get<bool>();
}

inline std::string string_of(const nlohmann::json& j, const std::string& path) {
  if (!j.is_string()) fail(path, "expected a string, got " + j.dump());
  return j.get<std::string>();
}

// A 64-bit unsigned integer written as a decimal string (JSON numbers would lose bits in many readers).
inline std::uint64_t u64_of(const nlohmann::json& j, const std::string& path) {
  const std::string text = string_of(j, path);
  try {
    std::size_t used = 0;
    const auto v = std::stoull(text, &used, 10);
    if (used != text.size() || text.empty() || text[0] == '-') throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    fail(path, "expected a decimal 64-bit unsigned integer, got \"" + text + "\"");
  }
}

// Runs parse(); an std::invalid_argument it throws that does not already name a JSON path gets `path`.
template <class F>
auto named(const std::string& path, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.starts_with("JSON ")) throw;
    fail(path, what);
  }
}

}  // namespace accumcheck::models::json
