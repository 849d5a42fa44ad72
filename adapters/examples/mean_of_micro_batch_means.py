"""MISTAKE: each micro-batch normalises its own loss, then divides by G (the mean of micro-batch means).

This is OpenRLHF <= 0.10.2 and the Hugging Face Trainer in transformers <= 4.45 (bug catalogue sections 2 and
3): the loss of micro-batch k is the masked token mean over that micro-batch's tokens alone, sum_t l_t / T_k,
and the loop divides it by the configured G. The correct window objective divides by the window's token
count, sum_k T_k. They agree only when every micro-batch has the same number of valid tokens; the smallest
trigger is G = 2 with micro-batches of 1 and 3 tokens. For every aggregation mode this adapter uses the
micro-batch (not the window) as the normalisation scope, then the Trainer's 1/G.

Upstream code that runs: torch 2.6.0 autograd and torch.optim, as torch-loop. Ours: everything else (the
kit's TorchLoop with micro_batch_loss overridden). Capabilities: torch-loop's, so the fuzzer can find this.
"""
from accumcheck_adapter import LoopAdapter, TorchLoop, deterministic_torch, serve, window_coefficients
from accumcheck_adapter.models import token_weights


class MeanOfMicroBatchMeans(TorchLoop):
    def micro_batch_loss(self, batch):
        per_micro_batch = window_coefficients(self.scenario.aggregation, [[batch.sequences]])[0][0]
        losses = self.model(batch.sequences)
        loss = (losses * token_weights(batch.sequences, per_micro_batch, self.dtype)).sum()
        return loss / self.scenario.engine.accumulation_steps  # the Trainer's loss / gradient_accumulation_steps


if __name__ == "__main__":
    deterministic_torch()
    raise SystemExit(serve(LoopAdapter(MeanOfMicroBatchMeans, name="mean-of-micro-batch-means",
                                       description="MISTAKE: per-micro-batch token mean divided by G")))
