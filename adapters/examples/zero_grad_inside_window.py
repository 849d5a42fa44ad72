"""MISTAKE: optimizer.zero_grad() before every backward, inside the accumulation window.

The loop zeroes the gradients at the top of the micro-batch loop instead of after optimizer.step(), so each
backward throws away what the window had accumulated and only the last micro-batch of each window reaches the
optimizer (the same outcome as DeepSpeed's GA=1 overwrite, bug catalogue section 1.1). With micro-batch
gradients 1, 10, 100 the optimizer sees 100 instead of 111.

Upstream code that runs: torch 2.6.0 autograd and torch.optim, as torch-loop. Ours: everything else (the
kit's TorchLoop with before_backward overridden). Capabilities: torch-loop's, so the fuzzer can find this.
"""
from accumcheck_adapter import LoopAdapter, TorchLoop, deterministic_torch, serve


class ZeroGradInsideWindow(TorchLoop):
    def before_backward(self, batch):
        self.optimizer.zero_grad()


if __name__ == "__main__":
    deterministic_torch()
    raise SystemExit(serve(LoopAdapter(ZeroGradInsideWindow, name="zero-grad-inside-window",
                                       description="MISTAKE: zero_grad() before every backward")))
