// The accumcheck command.
#include "fuzz/cli.h"

int main(int argc, char** argv) { return accumcheck::fuzz::run_cli(argc, argv); }
