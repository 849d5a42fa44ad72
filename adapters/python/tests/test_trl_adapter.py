"""The real TRL SFTTrainer over real DeepSpeed with TRL's ZeRO-2 accelerate config, optimizer offloaded to the CPU
(adapters/trl/adapter.py), one rank, on the catalogue's scenario: G = 3, one trainable scalar, micro-batch gradients
1, 10, 100 (times 1000 in the second window), one valid token each, the token mean, Adam or AdamW (SGD is refused:
accelerate would step it as Adam). The first window's token mean is 111/3 = 37. Measured, and asserted per installed
release (docs/trl-adapter.md):
  - TRL 0.12.2 (transformers 4.46.3) over DeepSpeed 0.16.4 drops micro-batch 1 (101 in place of 111), and its
    Trainer divides the window's token mean by G once more (transformers PR #35808, first released in 4.49.0, as
    test_transformers_deepspeed_adapter.py measures for the Trainer alone): 101/9;
  - TRL 1.14.2 (transformers 5.24.0) over DeepSpeed 0.19.8: 37.
The optimizer that stepped is DeepSpeedCPUAdam (the adapter checks it and its hyperparameters on every run; its
moments are reported); an SGD scenario, ZeRO-1 and offload off are refused as unsupported, naming why, and on 0.12.2
an Adam scenario with weight decay (accelerate 1.1.1 would step it as AdamW), which 1.14.2 runs. Each release
needs scripts/trl-env.sh (and its transformers and DeepSpeed); a missing one is skipped with the command that
installs it. A release given another transformers than its METADATA admits is refused with that requirement.
"""

from __future__ import annotations

import importlib.util
import json
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


deepspeed_release = _load("deepspeed_release_trl", "deepspeed/release.py")
transformers_release = _load("transformers_release_trl", "transformers/release.py")

RELEASES = (("0.12.2", "4.46.3", "0.16.4", Fraction(101, 9)), ("1.14.2", "5.24.0", "0.19.8", Fraction(37)))
FRONT = ADAPTERS / "trl" / "adapter.py"
HELLO = {"type": "hello", "id": 0, "protocol": 1, "client": "pytest"}
# (optimizer, zero stage, offload, weight decay), and the refusal's words where the adapter refuses ({version: words}
# where it depends on the release): accelerate 1.1.1, under 0.12.2, steps Adam as AdamW, which differs with decay.
ADAM_AS_ADAMW = {"0.12.2": "Adam with weight decay: this accelerate steps every optimizer as DeepSpeedCPUAdam in AdamW"}
SETUPS = (("adamw", 2, True, "0", None), ("adam", 2, True, "0", None),
          ("sgd", 2, True, "0", "'sgd' is not in the adapter's"), ("adamw", 1, True, "0", "ZeRO stage 1"),
          ("adamw", 2, False, "0", "offload"), ("adam", 2, True, "1/64", ADAM_AS_ADAMW))


def request(kind: str, stage: int, offload: bool, decay: str, request_id: int) -> dict:
    msg = catalogue.request(zero_stage=stage, offload=offload, request_id=request_id).to_json()
    msg["scenario"]["training"]["aggregation"] = {"mode": "token-mean"}
    msg["scenario"]["training"]["optimizer"]["kind"] = kind
    msg["scenario"]["training"]["optimizer"]["weight_decay"] = decay
    msg["values"]["training"]["weight_decay"] = float(Fraction(decay))  # the nearest double, as the C++ side sends
    return msg


def release_python(version: str) -> str | None:
    """The release's launcher (scripts/trl-env.sh), else None."""
    launcher = ADAPTERS.parent / ".venv" / "trl" / version / "bin" / "python"
    stamp = launcher.parent.parent / ".accumcheck-stamp"
    return str(launcher) if stamp.is_file() else None


def skip_unless_installed(version: str, trainer: str, deepspeed: str) -> str:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not deepspeed_release.installed(deepspeed):
        pytest.skip(f"needs DeepSpeed {deepspeed}: run ACCUMCHECK_DEEPSPEED_RELEASES={deepspeed} "
                    "scripts/deepspeed-env.sh")
    if not transformers_release.installed(trainer):
        pytest.skip(f"needs transformers {trainer}: run {transformers_release.install_command(trainer)}")
    python = release_python(version)
    if python is None:
        pytest.skip(f"needs TRL {version}: run ACCUMCHECK_TRL_RELEASES={version} scripts/trl-env.sh")
    return python


@pytest.mark.parametrize(("version", "trainer", "deepspeed", "want"), RELEASES,
                         ids=[f"{v}+{d}" for v, _, d, _ in RELEASES])
def test_trl_applies_what_was_measured(version: str, trainer: str, deepspeed: str, want: Fraction) -> None:
    python = skip_unless_installed(version, trainer, deepspeed)
    lines = [HELLO, *(request(k, z, o, d, i + 1) for i, (k, z, o, d, _) in enumerate(SETUPS)), {"type": "shutdown"}]
    done = subprocess.run([python, str(FRONT), "--version", version, "--transformers", trainer,
                           "--deepspeed", deepspeed], check=False, timeout=600,
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["adapter"]["name"] == f"trl-{version}+deepspeed-{deepspeed}"
    assert replies[0]["capabilities"]["zero_stages"] == [2] and replies[0]["capabilities"]["offload"] == [True]
    assert len(replies) == len(SETUPS) + 1, done.stderr[-4000:]
    for (kind, _stage, _offload, decay, refusal), reply in zip(SETUPS, replies[1:], strict=True):
        if isinstance(refusal, dict):
            refusal = refusal.get(version)
        if refusal is not None:
            assert reply["type"] == "error" and reply["kind"] == "unsupported", reply
            assert refusal in reply["message"], reply
            continue
        assert reply["type"] == "result", reply
        got = [step["gradient"]["weight"][0][0] for step in reply["steps"]]
        assert len(got) == 2
        assert got[0] == pytest.approx(float(want), rel=2e-7), (kind, decay, got)
        # DeepSpeedCPUAdam's moments after two steps, and its own step count.
        assert reply["optimizer_state"]["step_count"]["weight"] == 2
        assert reply["optimizer_state"]["second_moment"]["weight"][0][0] > 0
    # accelerate's launch environment for TRL's zero2.yaml with the optimizer offloaded
    assert '"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu"' in done.stderr


def test_a_missing_release_names_its_install_command() -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    done = subprocess.run([sys.executable, str(FRONT), "--version", "0.0.1", "--transformers", "4.46.3",
                           "--deepspeed", "0.16.4"], check=False, timeout=120, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout == ""
    if not deepspeed_release.installed("0.16.4"):
        assert "ACCUMCHECK_DEEPSPEED_RELEASES=0.16.4" in done.stderr
    elif not transformers_release.installed("4.46.3"):
        assert "ACCUMCHECK_TRANSFORMERS_RELEASES=4.46.3" in done.stderr
    else:
        assert "ACCUMCHECK_TRL_RELEASES=0.0.1 scripts/trl-env.sh" in done.stderr


def test_a_release_on_the_wrong_transformers_is_refused_by_its_own_requirement() -> None:
    python = skip_unless_installed("1.14.2", "4.46.3", "0.19.8")
    done = subprocess.run([python, str(FRONT), "--version", "1.14.2", "--transformers", "4.46.3", "--deepspeed",
                           "0.19.8"], check=False, timeout=120, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "TRL 1.14.2 asks transformers>=4.56.2, not 4.46.3" in done.stderr
    assert done.stdout == ""
