"""Side B of bench/adapter_protocol_bench: the torch-loop adapter's run() called directly, in one process.

Loads the run requests the bench wrote (one JSON line each), decodes every one once with the kit
(RunRequest.from_json), runs the first --warmup of them untimed, prints a ready line, then for every line
"run" on stdin times adapter.run(request) for each request with time.perf_counter (no pipe, no JSON per
trial) and prints {"trials": N, "run_s": sum of the run times}; it exits at end of input or any other line.
The process stays up between rounds so that every round finds torch as warm as the protocol's adapter
process finds it. The adapter is the one adapters/torch-loop/adapter.py's main() builds (imported by path;
its serve is replaced by a function that keeps the adapter), so the torch settings (deterministic_torch) are
the shipped ones.

With --breakdown it first runs every line the way the kit's serve does, minus the pipe, and times each part
(json.loads, RunRequest.from_json, the capabilities check, run, result.to_json and json.dumps as the kit
writes a reply), and puts the sums in the ready line: "loads_s", "decode_s", "check_s", "run_in_loop_s" (run()
between that JSON work) and "encode_s", in seconds. --replies (with --breakdown) writes each reply line, for
the bench's bit-for-bit comparison with the protocol's results.
    echo run | python bench/adapter_in_process.py --requests R.jsonl --adapter adapters/torch-loop/adapter.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any


def load_adapter(path: Path) -> Any:
    """The adapter object adapter.py's main() would serve."""
    spec = importlib.util.spec_from_file_location("torch_loop_adapter", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"adapter_in_process: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kept: list[Any] = []

    def keep(adapter: Any, **_: Any) -> int:
        kept.append(adapter)
        return 0

    module.serve = keep  # main() looks serve up in the module at call time
    module.main()
    if len(kept) != 1:
        raise SystemExit(f"adapter_in_process: {path}'s main() did not hand one adapter to serve")
    return kept[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--adapter", type=Path, required=True, help="adapters/torch-loop/adapter.py")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--replies", type=Path)
    args = parser.parse_args()
    if args.replies and not args.breakdown:
        parser.error("--replies needs --breakdown")

    adapter = load_adapter(args.adapter)
    from accumcheck_adapter import RunRequest  # after adapter.py, which needs the same kit

    lines = args.requests.read_text(encoding="utf-8").splitlines()
    requests = [RunRequest.from_json(json.loads(line)) for line in lines]
    capabilities = adapter.capabilities()
    for request in requests[: args.warmup]:
        adapter.run(request)

    summary: dict[str, Any] = {"trials": len(requests)}
    if args.breakdown:
        # What protocol._answer and _write do per line, without the pipe, each part timed on its own. Per
        # trial, as serve does, so that the garbage collector sees the same short-lived objects.
        parts = {"loads_s": 0.0, "decode_s": 0.0, "check_s": 0.0, "run_in_loop_s": 0.0, "encode_s": 0.0}
        replies = []
        for line in lines:
            t0 = time.perf_counter()
            message = json.loads(line)
            t1 = time.perf_counter()
            request = RunRequest.from_json(message)
            t2 = time.perf_counter()
            capabilities.check(request)
            t3 = time.perf_counter()
            result = adapter.run(request)
            t4 = time.perf_counter()
            replies.append(json.dumps(result.to_json(request.id), allow_nan=False, separators=(",", ":")))
            t5 = time.perf_counter()
            for key, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                parts[key] += seconds
        summary.update(parts)
        if args.replies:
            args.replies.write_text("".join(line + "\n" for line in replies), encoding="utf-8")

    # Ready: the summary so far, then one timed pass over every request per "run" line on stdin.
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    for command in sys.stdin:
        if command.strip() != "run":
            break
        run_s = 0.0
        for request in requests:
            t0 = time.perf_counter()
            adapter.run(request)
            run_s += time.perf_counter() - t0
        sys.stdout.write(json.dumps({"trials": len(requests), "run_s": run_s}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
