"""accumcheck adapter kit: write an accumcheck adapter (docs/adapter-protocol.md, protocol 1) in a few lines.

    from accumcheck_adapter import LoopAdapter, TorchLoop, serve

    class MyLoop(TorchLoop):                       # the correct loop, with one hook changed
        def micro_batch_loss(self, batch): ...

    raise SystemExit(serve(LoopAdapter(MyLoop, name="my-loop")))

Without torch: serve, Adapter, Capabilities, Unsupported, the request (RunRequest, Scenario, Sequence, Call),
window_coefficients and the result (Result, StepReport). With torch: build_model, TorchLoop, LoopAdapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accumcheck_adapter.aggregation import Counts, count_scope, sequence_coefficient, window_coefficients
from accumcheck_adapter.capabilities import Capabilities, Limits, Reports
from accumcheck_adapter.errors import ProtocolError, Unsupported
from accumcheck_adapter.protocol import PROTOCOL_VERSION, Adapter, serve, stdout_to_stderr
from accumcheck_adapter.result import OptimizerStateReport, Result, StepReport
from accumcheck_adapter.scenario import Call, ModelSpec, RunRequest, Scenario, Sequence, engine_calls

if TYPE_CHECKING:
    from accumcheck_adapter.loop import LoopAdapter, MicroBatch, TorchLoop, deterministic_torch
    from accumcheck_adapter.models import SyntheticModel, build_model

# Names that need torch, imported on first use so that the protocol side works without it.
_TORCH_NAMES = {"build_model": "models", "SyntheticModel": "models", "TorchLoop": "loop",
                "MicroBatch": "loop", "LoopAdapter": "loop", "deterministic_torch": "loop"}


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        import importlib

        return getattr(importlib.import_module(f"accumcheck_adapter.{_TORCH_NAMES[name]}"), name)
    raise AttributeError(f"module 'accumcheck_adapter' has no attribute {name!r}")


__all__ = [
    "PROTOCOL_VERSION", "Adapter", "Call", "Capabilities", "Counts", "Limits", "LoopAdapter", "MicroBatch",
    "ModelSpec", "OptimizerStateReport", "ProtocolError", "Reports", "Result", "RunRequest", "Scenario",
    "Sequence", "StepReport", "SyntheticModel", "TorchLoop", "Unsupported", "build_model", "count_scope",
    "deterministic_torch", "engine_calls", "sequence_coefficient", "serve", "stdout_to_stderr", "window_coefficients",
]
