// The accumcheck command.
#include "surface/cli.h"

#ifdef ACCUMCHECK_MIMALLOC
#include <mimalloc.h>
#endif
#ifdef ACCUMCHECK_CUDA
#include "cuda/batched_command.h"
#include "cuda/offload_engine.h"
#include "sim/target.h"
#endif

int main(int argc, char** argv) {
#ifdef ACCUMCHECK_MIMALLOC
  // One call into mimalloc keeps the library a dependency of the program even under --as-needed linking, so
  // that it is loaded, and replaces malloc, in every build that asked for it.
  (void)mi_version();
#endif
#ifdef ACCUMCHECK_CUDA
  // Built with nvcc: the CUDA offload pipeline's targets (cuda-offload and its variants). Without a device they
  // are listed and every property says it could not run on them. And `accumcheck batched`, the batched mode.
  for (const auto& engine : accumcheck::cuda::offload_engine_models()) accumcheck::sim::register_engine_model(engine);
  accumcheck::surface::register_extension_command(accumcheck::cuda::batched_command());
#endif
  return accumcheck::surface::run_cli(argc, argv);
}
