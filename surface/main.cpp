// The accumcheck command.
#include "surface/cli.h"

#ifdef ACCUMCHECK_MIMALLOC
#include <mimalloc.h>
#endif

int main(int argc, char** argv) {
#ifdef ACCUMCHECK_MIMALLOC
  // One call into mimalloc keeps the library a dependency of the program even under --as-needed linking, so
  // that it is loaded, and replaces malloc, in every build that asked for it.
  (void)mi_version();
#endif
  return accumcheck::surface::run_cli(argc, argv);
}
