#!/usr/bin/env python3
"""Campaign metrics for accumcheck, taken through the `accumcheck` command (bench/ never links fuzz/).

Measures, each figure in one run of this script so ratios compare like with like:
  1. trials per second per property on the reference target, in fast-rational and rational, one job;
  2. for every built-in buggy target: trials to the first failure over 20 seeds (median, max) and the time to
     shrink it (median, max), with --ordinary;
  3. the speed-up of 2 jobs over 1 on the same campaign;
  4. resident memory (max RSS) of a short and a 10x longer campaign on the reference target.

Usage: bench/campaign_metrics.py [BUILD_DIR] [--quick]
Writes a JSON summary to stdout's last line and a table before it. Timings on a shared 2-core machine are
noisy; the script reports what it measured and nothing else.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BUGGY = [
    "deepspeed@0.16.0",
    "deepspeed@0.18.0",
    "openrlhf@0.10.2+deepspeed@0.18.9",
    "openrlhf@0.10.3+reference",
    "transformers@4.45+reference",
    "llamafactory+transformers@4.46+deepspeed@0.16.0",
    "canary-offload-nosync",
]
PROPERTY_1 = "accumulated_update_equals_full_batch_update"


def run(binary, args, workdir):
    """Runs accumcheck with a report; returns (report dict, wall seconds, max RSS in MiB of this child)."""
    report = os.path.join(workdir, "report.json")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([binary, "fuzz", "--quiet", "--no-corpus", "--findings", os.path.join(workdir, "findings"),
                           "--report", report] + args, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"accumcheck failed ({proc.returncode}): {proc.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(report) as f:
        data = json.load(f)
    # ru_maxrss of RUSAGE_CHILDREN is the maximum over all children so far; report it when it grew.
    return data, wall, max(after, before) / 1024.0


def main():
    build = "build/release"
    quick = "--quick" in sys.argv
    for arg in sys.argv[1:]:
        if not arg.startswith("--"):
            build = arg
    binary = os.path.join(build, "fuzz", "accumcheck")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no accumcheck at {binary}: build it first (cmake --build --preset release)")
    props = subprocess.run([binary, "list", "properties"], capture_output=True, text=True, check=True).stdout.split()
    props = [p for p in props if "_" in p and not p[0].isdigit()]
    summary = {"quick": quick}
    work = tempfile.mkdtemp(prefix="accumcheck-bench-")

    # 1. Trials per second per property on the reference target.
    trials = 500 if quick else 3000
    per_property = {}
    for scalar in ("fast-rational", "rational"):
        for prop in props:
            n = trials if scalar == "fast-rational" else trials // 5
            report, _, _ = run(binary, ["--target", "reference", "--property", prop, "--seed", "1", "--trials", str(n),
                                        "--jobs", "1", "--scalar", scalar], work)
            per_property.setdefault(prop, {})[scalar] = round(report["trials_per_second"], 1)
    summary["reference_trials_per_second"] = per_property
    print(f"{'property':<56} {'fast-rational/s':>16} {'rational/s':>12}")
    for prop, v in per_property.items():
        print(f"{prop:<56} {v['fast-rational']:>16} {v['rational']:>12}")

    # 2. Time to first failure per buggy target, 20 seeds.
    seeds = range(1, 6 if quick else 21)
    print(f"\n{'buggy target (property 1, --ordinary)':<50} {'median':>7} {'max':>5} {'shrink med s':>13} {'shrink max s':>13}")
    ttff = {}
    for target in BUGGY:
        trial_counts, shrink = [], []
        for seed in seeds:
            report, _, _ = run(binary, ["--target", target, "--property", PROPERTY_1, "--seed", str(seed), "--trials", "2000",
                                        "--jobs", "1", "--ordinary"], work)
            pair = report["results"]["pairs"][0]
            if not pair["found"]:
                trial_counts.append(None)
                continue
            trial_counts.append(pair["trials_to_first_failure"])
            shrink.append(report["timing"]["pairs"][0]["shrink_seconds"])
        found = [t for t in trial_counts if t is not None]
        ttff[target] = {"seeds": len(trial_counts), "found": len(found),
                        "median_trials": statistics.median(found) if found else None,
                        "max_trials": max(found) if found else None,
                        "median_shrink_seconds": round(statistics.median(shrink), 4) if shrink else None,
                        "max_shrink_seconds": round(max(shrink), 4) if shrink else None}
        t = ttff[target]
        print(f"{target:<50} {t['median_trials']!s:>7} {t['max_trials']!s:>5} {t['median_shrink_seconds']!s:>13} "
              f"{t['max_shrink_seconds']!s:>13}   ({t['found']}/{t['seeds']} found)")
    summary["time_to_first_failure"] = ttff

    # 3. Two jobs over one, same campaign (the results are identical; only the time differs).
    campaign = ["--target", "reference", "--target", "deepspeed@0.19.0", "--seed", "5", "--trials", "1024" if quick else "4096"]
    r1, w1, _ = run(binary, campaign + ["--jobs", "1"], work)
    r2, w2, _ = run(binary, campaign + ["--jobs", "2"], work)
    same = r1["results"] == r2["results"]
    summary["jobs"] = {"one_job_seconds": round(w1, 3), "two_jobs_seconds": round(w2, 3), "speedup": round(w1 / w2, 2),
                       "identical_results": same}
    print(f"\njobs: 1 job {w1:.2f}s, 2 jobs {w2:.2f}s, speed-up {w1 / w2:.2f}x, identical results: {same}")

    # 4. Memory: a campaign and one ten times longer, each in a fresh process.
    short_n, long_n = (2000, 20000) if quick else (10000, 100000)
    rss = {}
    for n in (short_n, long_n):
        proc = subprocess.run(["/usr/bin/env", "bash", "-c",
                               f"command -v /usr/bin/time >/dev/null && /usr/bin/time -f %M {binary} fuzz --quiet --no-corpus "
                               f"--findings {work}/f --target reference --property {PROPERTY_1} --seed 9 --trials {n} --jobs 2 "
                               f">/dev/null"], capture_output=True, text=True)
        lines = [l for l in proc.stderr.strip().splitlines() if l.strip().isdigit()]
        rss[n] = round(int(lines[-1]) / 1024.0, 1) if lines else None
    summary["max_rss_mib"] = {str(k): v for k, v in rss.items()}
    print(f"\nmax RSS: {short_n} trials {rss[short_n]} MiB, {long_n} trials {rss[long_n]} MiB")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
