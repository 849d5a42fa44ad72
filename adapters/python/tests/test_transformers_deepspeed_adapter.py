"""The real Trainer over real DeepSpeed (adapters/transformers/adapter.py --deepspeed), one rank, on the catalogue's
scenario: G = 3, one trainable scalar, micro-batch gradients 1, 10, 100 (times 1000 in the second window), one
valid token each, the token mean, SGD lr 1/8. The first window's token mean is 111/3 = 37. Measured, and asserted per
installed pair (docs/transformers-adapter.md, "Over DeepSpeed"):
  - DeepSpeed 0.16.4 ZeRO-2 + offload drops micro-batch 1: 101 in place of 111, under either Trainer;
  - transformers 4.46.3 divides the window's token mean by G once more: the model's loss is already over the
    window's count, and DeepSpeed's engine.backward divides by G, which 4.46.3 does not undo (transformers PR
    #35808, first released in 4.49.0, passes scale_wrt_gas=False): 37/3 at every ZeRO stage;
  - transformers 5.24.0 over DeepSpeed 0.19.8 at ZeRO-0: 37. 0.19.8's ZeRO-0 ignores scale_wrt_gas=False when the
    loss is the forward's output itself (docs/upstream/deepspeed-zero0-scale-wrt-gas-ignored.md), which gave 37/3
    with average_tokens_across_devices off; at 5.24.0's default (on) compute_loss multiplies the loss in place by
    the process count (1 here), and that loss is no longer the forward's output: the defect does not show.
Each pair needs scripts/transformers-env.sh and scripts/deepspeed-env.sh; a missing release is skipped with the
command that installs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest
from conftest import ADAPTERS, HAS_TORCH

sys.path.insert(0, str(ADAPTERS / "deepspeed"))
import catalogue


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ADAPTERS / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


transformers_release = _load("transformers_release_ds", "transformers/release.py")
deepspeed_release = _load("deepspeed_release_tds", "deepspeed/release.py")

PAIRS = (("4.46.3", "0.16.4"), ("4.46.3", "0.19.8"), ("5.24.0", "0.16.4"), ("5.24.0", "0.19.8"))
# (zero stage, offload): what each request runs.
SETUPS = ((2, True), (2, False), (1, True), (0, False))
FRONT = ADAPTERS / "transformers" / "adapter.py"
HELLO = {"type": "hello", "id": 0, "protocol": 1, "client": "pytest"}


def expected(trainer: str, deepspeed: str, stage: int, offload: bool) -> Fraction:
    """The applied gradient of the first window, as measured (module docstring)."""
    total = 101 if (deepspeed == "0.16.4" and stage == 2 and offload) else 111
    mean = Fraction(total, 3)
    if trainer == "4.46.3":
        mean /= 3
    return mean


def requests() -> list[dict]:
    out = []
    for i, (stage, offload) in enumerate(SETUPS):
        msg = catalogue.request(zero_stage=stage, offload=offload, request_id=i + 1).to_json()
        msg["scenario"]["training"]["aggregation"] = {"mode": "token-mean"}
        out.append(msg)
    return out


@pytest.mark.parametrize(("trainer", "deepspeed"), PAIRS, ids=[f"{t}+{d}" for t, d in PAIRS])
def test_the_trainer_over_deepspeed_applies_what_was_measured(trainer: str, deepspeed: str) -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not transformers_release.installed(trainer):
        pytest.skip(f"needs transformers {trainer}: run {transformers_release.install_command(trainer)}")
    if not deepspeed_release.installed(deepspeed):
        pytest.skip(f"needs DeepSpeed {deepspeed}: run ACCUMCHECK_DEEPSPEED_RELEASES={deepspeed} "
                    "scripts/deepspeed-env.sh")
    lines = [HELLO, *requests(), {"type": "shutdown"}]
    done = subprocess.run([sys.executable, str(FRONT), "--version", trainer, "--deepspeed", deepspeed], check=False,
                          timeout=600, input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["adapter"]["name"] == f"transformers-{trainer}+deepspeed-{deepspeed}"
    assert len(replies) == len(SETUPS) + 1, done.stderr[-4000:]
    for (stage, offload), reply in zip(SETUPS, replies[1:], strict=True):
        assert reply["type"] == "result", reply
        want = expected(trainer, deepspeed, stage, offload)
        got = [step["gradient"]["weight"][0][0] for step in reply["steps"]]
        # The first window, at w = 0 (the second starts where the first step left w).
        assert len(got) == 2
        assert got[0] == pytest.approx(float(want), rel=2e-7), (stage, offload, got)


# DeepSpeed alone, the reproducer of docs/upstream/deepspeed-zero0-scale-wrt-gas-ignored.md: its exit status per
# release (1: the defect), with the forward's output passed to backward, and with `output * 1` (always 0).
REPRODUCER = ADAPTERS.parent / "docs" / "upstream" / "deepspeed-zero0-scale-wrt-gas-ignored.py"
SCALE_WRT_GAS_IGNORED = {"0.16.4": False, "0.18.9": False, "0.19.0": False, "0.19.8": True}


@pytest.mark.parametrize("deepspeed", list(SCALE_WRT_GAS_IGNORED))
def test_zero0_scale_wrt_gas_reproducer_exits_1_exactly_where_measured(deepspeed: str) -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not deepspeed_release.installed(deepspeed):
        pytest.skip(f"needs DeepSpeed {deepspeed}: run ACCUMCHECK_DEEPSPEED_RELEASES={deepspeed} "
                    "scripts/deepspeed-env.sh")
    root = deepspeed_release.release_dir(deepspeed)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root.parent / '_deps'}"}
    for flags, want in (([], 1 if SCALE_WRT_GAS_IGNORED[deepspeed] else 0), (["--times-one"], 0)):
        done = subprocess.run([sys.executable, str(REPRODUCER), *flags], check=False, timeout=300, env=env,
                              capture_output=True, text=True)
        assert done.returncode == want, (flags, done.stdout, done.stderr[-3000:])
        assert f"DeepSpeed {deepspeed}, ZeRO-0" in done.stdout
