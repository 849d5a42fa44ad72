// The command line and the build record (fuzz/build_info.h); the version and commit are generated.
#include "fuzz/build_info.h"

#include <utility>

namespace accumcheck::fuzz {
namespace {
std::vector<std::string>& command_line_storage() {
  static std::vector<std::string> argv;
  return argv;
}
}  // namespace

void set_command_line(std::vector<std::string> argv) { command_line_storage() = std::move(argv); }
const std::vector<std::string>& command_line() { return command_line_storage(); }

nlohmann::json build_record() {
  return nlohmann::json{{"version", accumcheck_version()}, {"commit", accumcheck_commit()}, {"argv", command_line()}};
}

}  // namespace accumcheck::fuzz
