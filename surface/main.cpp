// The accumcheck command.
#include "surface/cli.h"

int main(int argc, char** argv) { return accumcheck::surface::run_cli(argc, argv); }
