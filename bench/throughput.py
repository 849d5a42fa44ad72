#!/usr/bin/env python3
"""Trials per CPU-second of accumcheck's campaigns: beside the Hypothesis + PyTorch peer, and as a scaling table.

One run measures, each side pinned to the same core so that the figures are one-core figures taken under the
same conditions:

  1. The peer (bench/peer/hypothesis_property1.py) and `accumcheck fuzz` on property 1 with the peer's scenario
     distribution, interleaved: peer, ours, peer, ours, ... (--rounds, default 3). Each round's ratio and the
     median ratio are printed. The peer's sizes in our generator's words: the linear model (input size <= 4,
     output size <= 2), one optimizer step, one rank, G <= 4, at most 3 sequences per micro-batch (so at most
     12 in a window, the peer's maximum) of at most 6 tokens.
  2. The scaling table: property 1 on the linear model at the smallest scenario (every limit 1: what a trial
     costs whatever its data), and as the model width, G, the rank count and the step count grow one at a time
     from the peer's sizes, then the default generator on property 1 and on all nine properties (the default
     campaign), and the default campaign on each model kind alone.
  3. --jobs 2 against --jobs 1 on the same trials (wall clock, unpinned), whose results must be identical; and,
     as the machine's own ceiling for that figure, two --jobs 1 processes on the same trials at once: twice the
     trials in the wall time of the slower, against one process alone. Two cores that share caches, memory or a
     hypervisor's time give two independent processes less than 2x; --jobs 2 cannot beat that.

A figure is trials divided by the CPU seconds (user + system) of the accumcheck process, which include its
start-up; the peer's are its own `cpu_seconds` (the Hypothesis run, generation and shrinking included).
Every campaign runs `--jobs 1 --no-corpus` on the reference target with `--seed 1`, and must come back clean: a finding on
the reference target would be a defect of accumcheck, and the script then exits 1 instead of printing figures.

Usage: bench/throughput.py [BUILD_DIR] [--rounds N] [--seconds S] [--peer-trials N] [--quick] [--no-peer]
  BUILD_DIR     default build/release (needs BUILD_DIR/surface/accumcheck)
  --seconds S   campaign budget per measurement (default 3; --quick 1)
  --quick       one round, 300 peer trials, 1 s per measurement
  --no-peer     the scaling table only (the peer needs Debian's python3-hypothesis and python3-torch)
The last line of stdout is a JSON summary. Exit: 0 measured, 1 a side failed, 2 missing binary or packages.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "peer", "hypothesis_property1.py")
DEBIAN_PYTHON = "/usr/bin/python3"  # python3 on PATH may be another interpreter without Debian's dist-packages
PROPERTY_1 = "accumulated_update_equals_full_batch_update"

# The peer's scenario distribution (bench/peer/README.md) in the generator's limits.
PEER_SIZES = ["--model", "linear", "--max-steps", "1", "--max-ranks", "1", "--max-accumulation-steps", "4",
              "--max-sequences", "3", "--max-tokens", "6"]


def with_limit(flag, value):
    """PEER_SIZES with one limit replaced (or added)."""
    args = list(PEER_SIZES)
    if flag in args:
        args[args.index(flag) + 1] = str(value)
    else:
        args += [flag, str(value)]
    return args


# The smallest scenario the generator makes: every limit at 1 (one token of one sequence, a 1 x 1 linear model,
# G = 1, one rank, one step). A trial there costs what every trial costs whatever its data: the engine run, the
# oracle, the generator and the harness around them.
SMALLEST = ["--model", "linear", "--max-steps", "1", "--max-ranks", "1", "--max-accumulation-steps", "1",
            "--max-sequences", "1", "--max-tokens", "1", "--max-width", "1"]

# The first row is the peer's sizes, the second the smallest scenario; each other row raises one limit from the
# peer's sizes (the width raises every model dimension).
SCALING = (
    [("peer's sizes", "peer", 1, [PROPERTY_1], PEER_SIZES),
     ("smallest scenario (every limit 1)", "smallest", 1, [PROPERTY_1], SMALLEST)]
    + [(f"width <= {w}", "width", w, [PROPERTY_1], with_limit("--max-width", w)) for w in (1, 4, 16, 64)]
    + [(f"G <= {g}", "G", g, [PROPERTY_1], with_limit("--max-accumulation-steps", g)) for g in (1, 16, 64)]
    + [(f"ranks <= {r}", "ranks", r, [PROPERTY_1], with_limit("--max-ranks", r)) for r in (4, 16)]
    + [(f"steps <= {s}", "steps", s, [PROPERTY_1], with_limit("--max-steps", s)) for s in (3, 16, 64)]
    + [("default generator, linear", "default", 1, [PROPERTY_1], ["--model", "linear"]),
       ("default generator, every model", "default", 1, [PROPERTY_1], []),
       ("default campaign (all nine properties)", "default", 9, [], [])]
    + [(f"default campaign, {m} only", "model", m, [], ["--model", m]) for m in ("linear", "mlp", "tied_embedding")]
)


def pinned():
    """taskset to one core (the lowest this process may use), or nothing when taskset is missing."""
    if not shutil.which("taskset"):
        print("throughput.py: taskset not found; running unpinned", file=sys.stderr)
        return []
    return ["taskset", "-c", str(min(os.sched_getaffinity(0)))]


def child_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fuzz_command(binary, properties, limits, budget, jobs, report):
    """The `accumcheck fuzz` command line every measurement runs: the reference target, seed 1, no corpus."""
    command = [binary, "fuzz", "--target", "reference", "--seed", "1", "--jobs", str(jobs), "--no-corpus",
               "--report", report] + budget + limits
    for p in properties:
        command += ["--property", p]
    return command


def clean_report(report, command):
    """The report of a campaign that ran; exits unless the reference target came back clean."""
    with open(report) as f:
        data = json.load(f)
    findings = [p for p in data["results"]["pairs"] if p["found"]]
    if findings:
        sys.exit(f"throughput.py: the reference target failed {findings[0]['property']}: a defect of accumcheck, "
                 f"not a figure ({' '.join(command)})")
    return data


def campaign(binary, properties, limits, budget, jobs, workdir, pin):
    """One `accumcheck fuzz` on the reference target; returns (its report, CPU seconds of the process). `budget` is
    ["--time", S] or ["--trials", N]. Exits unless it ran and came back clean."""
    report = os.path.join(workdir, f"campaign-jobs{jobs}.json")
    command = (pinned() if pin else []) + fuzz_command(binary, properties, limits, budget, jobs, report)
    before = child_cpu_seconds()
    done = subprocess.run(command, capture_output=True, text=True)
    cpu = child_cpu_seconds() - before
    if done.returncode != 0:
        sys.exit(f"throughput.py: accumcheck failed (exit {done.returncode}): {' '.join(command)}\n"
                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return clean_report(report, command), cpu


def run_ours(binary, properties, limits, seconds, workdir):
    """One pinned campaign of `seconds`; returns (trials, trials per CPU-second)."""
    data, cpu = campaign(binary, properties, limits, ["--time", str(seconds)], 1, workdir, pin=True)
    return data["trials"], data["trials"] / cpu


def run_jobs(binary, properties, limits, trials, jobs, workdir):
    """One unpinned campaign of a fixed number of trials; returns (results section, wall seconds of the campaign)."""
    data, _ = campaign(binary, properties, limits, ["--trials", str(trials)], jobs, workdir, pin=False)
    return data["results"], data["seconds"]


def run_pair(binary, properties, limits, trials, workdir):
    """Two unpinned `--jobs 1` campaigns of the same trials at once; returns (results section, the wall seconds of
    each, as each campaign timed itself). Output goes to files, so that neither waits on a pipe nobody reads yet.
    Exits unless both ran, came back clean and agree."""
    runs = []
    for k in (1, 2):
        report = os.path.join(workdir, f"campaign-pair{k}.json")
        command = fuzz_command(binary, properties, limits, ["--trials", str(trials)], 1, report)
        log = open(os.path.join(workdir, f"campaign-pair{k}.log"), "w+")
        runs.append((report, command, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
    results, seconds = [], []
    for report, command, log, process in runs:
        with log:
            if process.wait() != 0:
                log.seek(0)
                sys.exit(f"throughput.py: accumcheck failed (exit {process.returncode}): {' '.join(command)}\n"
                         f"{log.read()[-4000:]}")
        data = clean_report(report, command)
        results.append(data["results"])
        seconds.append(data["seconds"])
    if results[0] != results[1]:
        sys.exit("throughput.py: two runs of the same campaign gave different results, a defect of accumcheck")
    return results[0], seconds


def run_peer(trials, workdir):
    """One peer run; returns (trials, trials per CPU-second)."""
    command = pinned() + [DEBIAN_PYTHON, PEER, "--trials", str(trials), "--seed", "1"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    if done.returncode != 0:
        sys.exit(f"throughput.py: the peer failed (exit {done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data["trials"], data["trials"] / data["cpu_seconds"]


def figure(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--peer-trials", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.peer_trials = 1, 1.0, 300
    if args.rounds < 1 or args.seconds <= 0 or args.peer_trials < 1:
        parser.error("--rounds, --seconds and --peer-trials must be positive")
    binary = os.path.join(args.build_dir, "surface", "accumcheck")
    if not os.access(binary, os.X_OK):
        print(f"throughput.py: {binary} not found or not executable; build it first: "
              "cmake --preset release && cmake --build --preset release --target accumcheck", file=sys.stderr)
        return 2
    if not args.no_peer and subprocess.run([DEBIAN_PYTHON, "-c", "import torch, hypothesis"],
                                           capture_output=True).returncode != 0:
        print(f"throughput.py: {DEBIAN_PYTHON} cannot import torch and hypothesis; install them with "
              "apt-get install -y python3-hypothesis python3-torch, or pass --no-peer", file=sys.stderr)
        return 2

    with open("/proc/loadavg") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}; {os.cpu_count()} cores; "
              f"{args.seconds:g} s per campaign")
    summary = {"seconds_per_campaign": args.seconds}
    with tempfile.TemporaryDirectory() as workdir:
        if not args.no_peer:
            print(f"\nproperty 1 at the peer's sizes, interleaved ({args.rounds} rounds, {args.peer_trials} peer trials "
                  "each); trials per CPU-second")
            print(f"{'round':>5}  {'peer':>8}  {'accumcheck':>11}  {'ratio':>8}")
            rounds = []
            for r in range(args.rounds):
                _, peer_rate = run_peer(args.peer_trials, workdir)
                _, our_rate = run_ours(binary, [PROPERTY_1], PEER_SIZES, args.seconds, workdir)
                rounds.append({"peer": peer_rate, "accumcheck": our_rate, "ratio": our_rate / peer_rate})
                print(f"{r + 1:>5}  {figure(peer_rate):>8}  {figure(our_rate):>11}  {figure(our_rate / peer_rate):>7}x")
            median = statistics.median(x["ratio"] for x in rounds)
            print(f"median ratio: {figure(median)}x the peer (the goal is 1000x)")
            summary["peer_rounds"] = rounds
            summary["median_ratio"] = median

        print("\nscaling: property 1 on the reference target from the peer's sizes, one limit raised at a time; "
              "trials per CPU-second")
        table = []
        for label, axis, value, properties, limits in SCALING:
            trials, rate = run_ours(binary, properties, limits, args.seconds, workdir)
            table.append({"class": label, "axis": axis, "value": value, "trials": trials, "trials_per_cpu_second": rate})
        base = table[0]["trials_per_cpu_second"]  # the peer's sizes
        print(f"{'class':<40} {'trials':>8} {'trials/CPU-s':>13} {'vs peer sizes':>14}")
        for row in table:
            print(f"{row['class']:<40} {row['trials']:>8} {figure(row['trials_per_cpu_second']):>13} "
                  f"{figure(row['trials_per_cpu_second'] / base):>13}x")
        summary["scaling"] = table

        print("\n--jobs 2 against --jobs 1 (wall clock, unpinned; the same trials must give the same results), and two "
              "--jobs 1 processes at once against one alone, the machine's ceiling for --jobs 2")
        jobs_rows = []
        # About ten seconds of one core each at --seconds 3: a short campaign is mostly its first, small chunks.
        for label, properties, limits, trials in (("property 1, peer's sizes", [PROPERTY_1], PEER_SIZES, 200000),
                                                  ("default campaign", [], [], 4000)):
            trials = max(1, int(trials * args.seconds / 3))
            one, one_seconds = run_jobs(binary, properties, limits, trials, 1, workdir)
            two, two_seconds = run_jobs(binary, properties, limits, trials, 2, workdir)
            if one != two:
                sys.exit(f"throughput.py: {label}: --jobs 2 gave other results than --jobs 1, a defect of accumcheck")
            pair, pair_seconds = run_pair(binary, properties, limits, trials, workdir)
            if pair != one:
                sys.exit(f"throughput.py: {label}: two processes at once gave other results than one alone, a defect "
                         "of accumcheck")
            pair_speedup = 2 * one_seconds / max(pair_seconds)
            jobs_rows.append({"class": label, "trials": trials, "jobs1_seconds": one_seconds, "jobs2_seconds": two_seconds,
                              "pair_seconds": pair_seconds, "pair_speedup": pair_speedup})
            print(f"{label:<40} {trials:>8} trials: {one_seconds:.2f} s / {two_seconds:.2f} s = "
                  f"{one_seconds / two_seconds:.2f}x, results identical; two --jobs 1 processes at once: "
                  f"{pair_seconds[0]:.2f} s and {pair_seconds[1]:.2f} s, {pair_speedup:.2f}x")
        summary["jobs"] = jobs_rows
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
