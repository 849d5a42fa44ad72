"""MISTAKE: clip_grad_norm_ after every backward instead of once per window.

Clipping is defined on the gradient of the whole window: coef = min(1, max_norm / (|g| + 1e-6)) with
g = sum_k g_k. Clipping the running sum after each micro-batch clips partial sums (and clips the same early
micro-batches again and again), so whenever some partial sum exceeds max_norm the applied gradient differs,
and the reported norm is that of the last partial sum (bug catalogue section 5: clipping per micro-batch
instead of per step). Without max_grad_norm it is the correct loop.

Upstream code that runs: torch 2.6.0 autograd, torch.optim and torch.nn.utils.clip_grad_norm_, as torch-loop.
Ours: everything else (the kit's TorchLoop with after_backward and before_step overridden). Capabilities:
torch-loop's, so the fuzzer can find this.
"""
import torch
from accumcheck_adapter import LoopAdapter, TorchLoop, deterministic_torch, serve
from accumcheck_adapter.loop import clip_coefficient


class ClipEveryMicroStep(TorchLoop):
    last_clip = (0.0, 1.0)

    def after_backward(self, batch):
        max_norm = self.scenario.max_grad_norm
        if max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(max_norm), foreach=False)
            self.last_clip = (float(norm), clip_coefficient(norm, float(max_norm)))

    def before_step(self, step):
        if self.scenario.max_grad_norm is None:
            return super().before_step(step)
        return self.last_clip  # already clipped, micro-step by micro-step


if __name__ == "__main__":
    deterministic_torch()
    raise SystemExit(serve(LoopAdapter(ClipEveryMicroStep, name="clip-every-micro-step",
                                       description="MISTAKE: clip_grad_norm_ after every backward")))
