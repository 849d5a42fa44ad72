// cuda_exact_bench: the exact linear-model sums on the device against the CPU, in one run, on the same random
// micro-batches (cuda/run-gpu-checks.sh prints it). Per size: micro-batches per second of models/'s Rational
// gradient (the reference), of the kernel's CPU twin (host_sums, one core), and of the device (device_sums: upload,
// kernel, copy back, per micro-batch, as the offload pipeline runs it), then the ratios. Every device result is
// compared with the CPU twin's; a difference is an error (exit 1).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "cuda/device.h"
#include "cuda/exact_linear.h"
#include "cuda/random_linear_batch.h"
#include "models/linear_model.h"
#include "models/model.h"

using namespace accumcheck;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

int main() {
  std::string why;
  if (!cuda::device_available(&why)) {
    std::printf("cuda_exact_bench: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  std::printf("device: %s\n", cuda::device_name().c_str());
  std::printf("%-22s %14s %14s %14s %10s %10s\n", "size (I x O, tokens)", "models/ mb/s", "CPU twin mb/s",
              "device mb/s", "dev/CPU", "dev/models");
  std::mt19937_64 rng(5);
  struct Size { int in, out, sequences, tokens; };
  for (const Size z : {Size{4, 4, 4, 8}, Size{32, 16, 8, 32}, Size{128, 64, 8, 64}, Size{512, 256, 8, 128}}) {
    models::ModelSpec spec;
    spec.input_size = z.in;
    spec.output_size = z.out;
    const cuda::RandomBatch r = cuda::random_batch(rng, spec, z.sequences, z.tokens);
    const std::vector<int> group(r.sequences.size(), 0);
    const cuda::ExactLinearBatch batch = cuda::lay_out(r.spec, r.params, r.sequences, group, 1);
    const std::vector<models::Rational> c(r.sequences.size(), models::Rational(1, 3));
    // Each path runs for at least 0.5 s.
    const auto rate = [](auto&& body) {
      const auto start = Clock::now();
      long n = 0;
      do {
        body();
        ++n;
      } while (seconds_since(start) < 0.5);
      return static_cast<double>(n) / seconds_since(start);
    };
    const double reference = rate([&] {
      auto grad = models::zero_gradient<models::Rational>(r.spec);
      models::linear_model::accumulate_gradient<models::Rational>(r.spec, r.params, r.sequences, c, grad);
    });
    const auto host = cuda::host_sums(batch);
    const double twin = rate([&] { (void)cuda::host_sums(batch); });
    bool same = true;
    const double device = rate([&] { same = same && cuda::device_sums(batch, cuda::LaunchConfig{}) == host; });
    if (!same) {
      std::printf("cuda_exact_bench: the device's sums differ from the CPU twin's at %dx%d\n", z.in, z.out);
      return 1;
    }
    const std::string label = std::to_string(z.in) + "x" + std::to_string(z.out) + ", " +
                              std::to_string(batch.token_count()) + " tokens";
    std::printf("%-22s %14.0f %14.0f %14.0f %9.1fx %9.1fx\n", label.c_str(), reference, twin, device, device / twin,
                device / reference);
  }
  return 0;
}
