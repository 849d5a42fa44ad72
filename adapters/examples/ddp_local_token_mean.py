"""MISTAKE: under DDP, each rank normalises its loss by its own rank-local counts, and DDP averages the ranks.

The per-rank normalisation of bug catalogue sections 2-4 (transformers >= 4.46 counting num_items_in_batch over
this rank's window only, without average_tokens_across_devices; OpenRLHF <= 0.10.2 across ranks): rank r
computes the window objective over its own sequences alone, sum_t l_t / T_r for the token mean, and DDP's
all-reduce averages the ranks, so the applied gradient is that of 1/W sum_r (sum_{t in r} l_t / T_r). The
correct objective divides by the window-global count sum_r T_r (and multiplies by W to undo the average).
They agree only when every rank has the same count; the smallest trigger is W = 2, G = 1, one sequence per
rank with 1 and 3 valid tokens. The same holds for the sequence counts of the seq-mean modes; the modes without
a count (sum, seq-mean-token-sum-norm) are left out, so that the count is the only thing wrong here.

Upstream code that runs: torch 2.6.0 DistributedDataParallel on gloo, torch.optim, as torch-ddp. Ours:
everything else (torch-ddp's DdpLoop with rank_coefficients overridden). Capabilities: torch-ddp's, with the
three count-based aggregations.
"""
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torch-ddp"))

from accumcheck_adapter import window_coefficients
from ddp_loop import DdpLoop
from ddp_ranks import main


class LocalTokenMean(DdpLoop):
    CAPABILITIES = replace(DdpLoop.CAPABILITIES,
                           aggregations=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"))

    def rank_coefficients(self, window):
        mine = [[ranks[self.rank]] for ranks in window]  # this rank's part of the window, as a one-rank window
        return [per_rank[0] for per_rank in window_coefficients(self.scenario.aggregation, mine)]


if __name__ == "__main__":
    main(LocalTokenMean, name="ddp-local-token-mean",
         description="MISTAKE: DDP with each rank's loss normalised by its rank-local counts")
