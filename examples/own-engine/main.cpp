// own-engine: the accumcheck command line (fuzz, replay, explain, export, list) with two engines of our own
// registered, the correct "own-ddp" and the faulty "own-ddp-drops-middle" (own_engine.h).
#include <memory>

#include "surface/cli.h"
#include "own_engine.h"

int main(int argc, char** argv) {
  return accumcheck::surface::run_cli(
      argc, argv,
      {std::make_shared<own_engine::OwnEngineModel>("own-ddp", own_engine::Faults{}),
       std::make_shared<own_engine::OwnEngineModel>("own-ddp-drops-middle",
                                                    own_engine::Faults{.drop_middle_micro_batches = true})});
}
