"""The gloo process group of the torch-ddp adapter's two ranks (ddp_ranks.py starts the processes).

Rank 0 hosts a TCPStore on 127.0.0.1 at a port the kernel picks (port 0, so no other process can take it
between choosing and binding) and hands the port to rank 1; both call init_process_group("gloo") with a
30-second timeout, which is every collective's deadline, and make the one-rank group {0} once, for one-rank
scenarios (new_group must be called by every rank of the world, so it cannot wait for the first such run).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import warnings
from typing import TYPE_CHECKING

import torch.distributed as dist
from accumcheck_adapter import Result, RunRequest, deterministic_torch
from ddp_ranks import PROCESS_GROUP_TIMEOUT_S

if TYPE_CHECKING:
    from ddp_loop import DdpLoop

_TIMEOUT = datetime.timedelta(seconds=PROCESS_GROUP_TIMEOUT_S)


def deterministic_distributed() -> None:
    """One intra-op thread and deterministic kernels (the kit's deterministic_torch); gloo on the loopback
    interface only, whatever the host's name resolves to."""
    deterministic_torch()
    # DDP's reducer notes once per process that a weight gradient of shape [n, 1] has the transposed strides
    # x @ W.T gives it; it copies across layouts (gradient_as_bucket_view=False), so this costs only time.
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["MASTER_ADDR"] = "127.0.0.1"


def master_store() -> dist.TCPStore:
    """Rank 0's store at a free port (store.port says which)."""
    store = dist.TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False, timeout=_TIMEOUT)
    os.environ["MASTER_PORT"] = str(store.port)
    return store


class Ranks:
    """This process's place in the gloo world of two: its rank, and the group a scenario of R ranks runs on
    (the whole world, or {0} alone)."""

    def __init__(self, rank: int, port: int, *, store: dist.TCPStore | None = None) -> None:
        if store is None:
            store = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=_TIMEOUT)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=_TIMEOUT)
        self.rank = rank
        self.world = dist.group.WORLD
        self.solo = dist.new_group([0], timeout=_TIMEOUT)

    def group(self, rank_count: int) -> dist.ProcessGroup:
        if rank_count not in (1, 2):
            raise ValueError(f"engine.rank_count: {rank_count} is not 1 or 2")
        return self.world if rank_count == 2 else self.solo

    def run(self, loop: type[DdpLoop], request: RunRequest) -> Result:
        """This rank's part of the request (rank 1 has none in a one-rank scenario)."""
        return loop(request, rank=self.rank, group=self.group(request.scenario.engine.rank_count)).run()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
