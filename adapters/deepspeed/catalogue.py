"""The catalogue's numeric reproducer (shared/bug-catalogue.md section 1) as a run request, and a hand check.

One trainable scalar w (the linear model's weight; its bias frozen), w = 0, the `sum` aggregation, per-token loss
1/2 (w x - y)^2 with x = 1 and y = -c: micro-batch k of rank r has gradient c_k * 1000^r, so the applied gradient
spells out in decimal digits which micro-batches reached the optimizer. Two windows, the second with every
gradient times 10^(3W), so that leakage between steps shows too.

    python catalogue.py --version 0.16.4 [--accumulation-steps 3] [--zero-stage 2] [--offload] [--world-size 1]

runs it through adapter.py (the real release, as accumcheck would) and prints the applied gradient per window
beside the correct one: 111 in window 0 for G = 3 on a correct DeepSpeed, 101 where micro-batch 1 is dropped
(0.15.2 - 0.18.9, ZeRO-2 with offload). Window 1 starts from the updated w (each token's gradient is w + c), so
its correct value is 111000 + 3 w.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accumcheck_adapter import ModelSpec, RunRequest, Scenario, Sequence, engine_calls
from accumcheck_adapter.scenario import Aggregation, EngineConfig, OptimizerSpec


def _sequence(target: int) -> Sequence:
    return Sequence([1], [[1.0]], [[float(target)]], [], [], [[Fraction(1)]], [[Fraction(target)]])


def request(*, accumulation_steps: int = 3, gradients: tuple[int, ...] = (1, 10, 100), zero_stage: int = 2,
            offload: bool = True, rank_count: int = 1, windows: int | None = None, request_id: int = 1,
            precision: str = "full") -> RunRequest:
    """The reproducer for G micro-batches with the given gradients (len(gradients) == G). Two windows on one
    rank; one on two ranks (a second, times 10^6, would leave fp32's exact integers). Precision bf16: one window
    (1, 10, 100 and their sums are exact in bf16's 8 significant bits; the second window's are not)."""
    if windows is None:
        windows = 2 if rank_count == 1 and precision == "full" else 1
    if len(gradients) != accumulation_steps:
        raise ValueError(f"gradients: {len(gradients)} values for G = {accumulation_steps}")
    model = ModelSpec("linear", input_size=1, output_size=1, expert_count=1, frozen=("bias",))
    shift = 1000 ** rank_count
    steps = [[[[_sequence(-c * 1000**r * shift**s)] for r in range(rank_count)] for c in gradients]
             for s in range(windows)]
    exact = {"weight": [[Fraction(0)]], "bias": [[Fraction(0)]]}
    # missing_gradient_is_zero: the flat-partition semantics the DeepSpeed adapter declares (no parameter here
    # lacks a gradient, so it changes nothing but the capability check).
    optimizer = OptimizerSpec("sgd", lr=Fraction(1, 8), missing_gradient_is_zero=True)
    scenario = Scenario(model, Aggregation("sum"), optimizer, None,
                        EngineConfig(rank_count=rank_count, accumulation_steps=accumulation_steps,
                                     zero_stage=zero_stage, offload=offload,
                                     boundary="automatic", step_after_every_backward=True, precision=precision),
                        {"weight": [[0.0]], "bias": [[0.0]]}, exact, steps, None, 0)
    draft = RunRequest(request_id, "fp32", scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--accumulation-steps", type=int, default=3)
    parser.add_argument("--zero-stage", type=int, default=2)
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--precision", choices=("full", "bf16"), default="full")
    args = parser.parse_args()
    g = args.accumulation_steps
    gradients = tuple(10**k for k in range(g))
    req = request(accumulation_steps=g, gradients=gradients, zero_stage=args.zero_stage, offload=args.offload,
                  rank_count=args.world_size, precision=args.precision)
    adapter = Path(__file__).resolve().parent / "adapter.py"
    lines = [json.dumps({"type": "hello", "id": 0, "protocol": 1, "client": "catalogue.py"}),
             json.dumps(req.to_json()), json.dumps({"type": "shutdown"})]
    out = subprocess.run([sys.executable, str(adapter), "--version", args.version], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, timeout=300, check=False)
    replies = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
    if len(replies) < 2 or replies[1].get("type") != "result":
        print(out.stderr[-3000:], file=sys.stderr)
        print(replies[1:] if len(replies) > 1 else "no reply", file=sys.stderr)
        return 1
    shift = 1000**args.world_size
    print(f"deepspeed {args.version}, ZeRO-{args.zero_stage}, offload {'on' if args.offload else 'off'}, "
          f"G = {g}, world size {args.world_size}, precision {args.precision}")
    w = Fraction(0)  # the correct trajectory: each token's gradient is w + c, w moved by SGD with lr 1/8
    for s, step in enumerate(replies[1]["steps"]):
        correct = g * args.world_size * w + sum(gradients) * sum(1000**r for r in range(args.world_size)) * shift**s
        got = step["gradient"]["weight"][0][0] if step["applied"] else None
        print(f"  window {s}: applied gradient {got!r:>14}  correct {float(correct):>14}  "
              f"grad_norm {step['grad_norm']!r}")
        w -= Fraction(1, 8) * correct
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
