// The accumcheck command. Exit codes: 0 clean, 1 findings (or a failed self-check), 2 usage or input error.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "fuzz/demo.h"

int main(int argc, char** argv) {
  CLI::App app{"accumcheck: checks that accumulated gradient updates equal full-batch updates"};
  app.require_subcommand(1);
  auto* demo = app.add_subcommand("demo", "Run the exact oracle on the catalogue's built-in examples");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (demo->parsed()) return accumcheck::fuzz::run_demo(std::cout);
  } catch (const std::exception& e) {
    std::cerr << "accumcheck: error: " << e.what() << "\n";
    return 2;
  }
  return 2;
}
