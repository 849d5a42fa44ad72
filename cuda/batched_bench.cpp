// cuda_batched_bench: the batched mode's exact trials of property 1 per second against the CPU path, in one run
// (cuda/run-gpu-checks.sh prints it). On the same trials of the linear model, then of every model (one step, the
// default generator otherwise; a quarter as many trials), under the correct framework layer (`reference`, every
// trial clean):
//   - the CPU path: fuzz::run_campaign of property 1 with two jobs (this project's 2-core machines);
//   - the batched mode on the device, end to end with two host threads (generating and laying out on the host, the
//     launches, the CPU path for the trials it does not cover), and its launches alone;
// then, under openrlhf@0.10.2's wrong weighting, the failures the device flagged, all confirmed on the CPU path.
// Without a device it says so and exits 77; `--twin` runs the kernel's CPU twin in the device's place.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/batched_trials.h"
#include "cuda/device.h"
#include "fuzz/campaign.h"

using namespace accumcheck;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

fuzz::GeneratorOptions linear_one_step() {
  fuzz::GeneratorOptions options;
  options.model = models::ModelKind::linear;
  options.step_count_max = 1;
  return options;
}

}  // namespace

// One distribution: the CPU path, the batched mode end to end and its checks alone, then the wrong layer's failures.
// Returns 0, or 1 when a result is wrong.
int measure(const char* label, const fuzz::GeneratorOptions& generator, std::uint64_t trials, std::uint64_t cpu_trials,
            bool twin) {
  const char* where = twin ? "CPU twin" : "device";
  fuzz::CampaignConfig cpu;
  cpu.targets = {"reference"};
  cpu.properties = {"accumulated_update_equals_full_batch_update"};
  cpu.seed = 1;
  cpu.trials = cpu_trials;
  cpu.jobs = 2;
  cpu.generator = generator;
  auto start = Clock::now();
  const fuzz::CampaignReport cpu_report = fuzz::run_campaign(cpu);
  const double cpu_rate = static_cast<double>(cpu_trials) / since(start);
  if (cpu_report.pairs.at(0).finding) {
    std::printf("cuda_batched_bench: the CPU path found a failure on the reference target\n");
    return 1;
  }

  cuda::BatchedCampaignConfig batched;
  batched.seed = 1;
  batched.trials = trials;
  batched.generator = generator;
  batched.backend = twin ? cuda::BatchedBackend::host_twin : cuda::BatchedBackend::device;
  batched.jobs = 2;  // the host's share on the same two cores as the CPU path
  start = Clock::now();
  const cuda::BatchedCampaignReport report = cuda::run_batched_campaign(batched);
  const double seconds = since(start);
  if (!report.failing_trials.empty() || !report.disagreements.empty()) {
    std::printf("cuda_batched_bench: the batched mode failed a trial on the reference target\n");
    return 1;
  }
  const double rate = static_cast<double>(trials) / seconds;
  const double check_rate = static_cast<double>(report.batched) / report.check_seconds;
  std::printf("property 1, %s, one step, reference target (exact trials per second, seed 1):\n", label);
  std::printf("  CPU path, run_campaign --jobs 2            %12.0f   (%llu trials)\n", cpu_rate,
              static_cast<unsigned long long>(cpu_trials));
  std::printf("  batched on the %-8s, end to end, 2 jobs %12.0f   %.1fx the CPU path (%llu trials: %llu batched, %llu on the CPU path)\n",
              where, rate, rate / cpu_rate, static_cast<unsigned long long>(trials),
              static_cast<unsigned long long>(report.batched), static_cast<unsigned long long>(report.cpu_path));
  std::printf("  batched on the %-8s, its checks alone  %12.0f   %.1fx the CPU path\n", where, check_rate,
              check_rate / cpu_rate);
  std::printf("  end-to-end seconds: %.2f laying out on the host, %.2f checking, %.2f on the CPU path\n",
              report.build_seconds, report.check_seconds, report.cpu_path_seconds);

  cuda::BatchedCampaignConfig wrong = batched;
  wrong.framework = "openrlhf@0.10.2";
  wrong.trials = trials / 10;
  start = Clock::now();
  const cuda::BatchedCampaignReport found = cuda::run_batched_campaign(wrong);
  std::printf("openrlhf@0.10.2+reference: %llu of %llu trials fail property 1 (%llu batched), every one confirmed on the "
              "CPU path; the first (trial %lld) shrunk in %.3f s; %.2f s in all\n",
              static_cast<unsigned long long>(found.failing_trials.size()), static_cast<unsigned long long>(wrong.trials),
              static_cast<unsigned long long>(found.batched),
              found.finding ? static_cast<long long>(found.finding->trial) : -1LL, found.shrink_seconds, since(start));
  if (!found.disagreements.empty() || !found.finding) {
    std::printf("cuda_batched_bench: %s\n", found.finding ? found.disagreements.front().c_str() : "no failure found");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  bool twin = false;
  std::uint64_t trials = 1000000, cpu_trials = 100000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--twin")) twin = true;
    else if (!std::strcmp(argv[i], "--trials") && i + 1 < argc) trials = std::stoull(argv[++i]);
    else if (!std::strcmp(argv[i], "--cpu-trials") && i + 1 < argc) cpu_trials = std::stoull(argv[++i]);
    else {
      std::fprintf(stderr, "usage: cuda_batched_bench [--twin] [--trials N] [--cpu-trials N]\n");
      return 2;
    }
  }
  std::string why;
  if (!twin && !cuda::device_available(&why)) {
    std::printf("cuda_batched_bench: no CUDA device (%s); --twin runs the CPU twin instead\n", why.c_str());
    return 77;
  }
  if (!twin) std::printf("device: %s\n", cuda::device_name().c_str());

  int status = measure("linear model", linear_one_step(), trials, cpu_trials, twin);
  // Every model: the MLP's and the tied embedding's trials recompute each token's forward pass per entry.
  status |= measure("every model", cuda::batched_one_step(), trials / 4, cpu_trials / 4, twin);
  return status;
}
