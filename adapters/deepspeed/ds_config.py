"""The DeepSpeed configuration of one scenario, with every knob the adapter relies on pinned.

DeepSpeed changes defaults between releases (0.19.0 made gradient_clipping 1.0, offload_optimizer.pin_memory went
from false to true), so nothing that affects accumulation, reduction, clipping or the optimizer is left to a
default. Keys that only some releases know (DeepSpeed's config models forbid unknown keys) are added when the
release's zero config has the field; `expected_engine_state` lists what the built engine must then report, and
the worker asserts it after deepspeed.initialize.

No DeepSpeed import here: the module is plain data, tested without an installed release.
"""

from __future__ import annotations

from typing import Any

from accumcheck_adapter import Scenario

# The scenario's bucket_element_count 0 means one bucket: reduce_bucket_size and allgather_bucket_size are then
# the model's element count (DeepSpeed flushes a bucket when the next gradient would exceed it), at least this.
# Not DeepSpeed's default of 5e8: its buckets are allocated at that size, and with torch's deterministic mode
# (which fills every new tensor with NaN, so that a read of uninitialised memory shows) 2 GB per trial cost ~20 s.
ONE_BUCKET_ELEMENTS_MIN = 1024
# steps_per_print: never, so that no progress report (which reads timers and the lr) runs inside a trial.
NEVER = 2**31 - 1


def zero_section(scenario: Scenario, release_zero_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """zero_optimization: stage, the reduction bucket (reduce_bucket_size = the scenario's bucket_element_count) and
    offload as the scenario says; everything else pinned."""
    e = scenario.engine
    element_count = sum(r * c for r, c in scenario.model.parameter_shapes())
    one_bucket = max(ONE_BUCKET_ELEMENTS_MIN, element_count)
    bucket = e.bucket_element_count or one_bucket
    # The all-gather of updated partitions after the step is not part of accumulation; ZeRO asserts that its
    # bucket is a multiple of nccl_start_alignment_factor (2), so it is one bucket, rounded up to even.
    allgather_bucket = max(one_bucket, bucket) + max(one_bucket, bucket) % 2
    zero: dict[str, Any] = {
        "stage": e.zero_stage,
        "contiguous_gradients": True,   # offload forces it on anyway; one layout for both
        "overlap_comm": False,          # reductions run inside the backward hooks, in order
        "reduce_scatter": True,
        "reduce_bucket_size": bucket,
        "allgather_partitions": True,
        "allgather_bucket_size": allgather_bucket,
        "use_multi_rank_bucket_allreduce": True,
        "round_robin_gradients": False,  # flat buffers keep the model's parameter order
        "ignore_unused_parameters": True,  # parameters without a gradient (routed experts) are allowed
        "elastic_checkpoint": False,
        "load_from_fp32_weights": True,
        "zero_quantized_weights": False,
        "zero_quantized_gradients": False,
    }
    if e.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False, "buffer_count": 4, "fast_init": False,
                                     "ratio": 1.0}
    # Fields of newer releases, pinned to the behaviour of the older ones.
    if "compute_grad_norm" in release_zero_fields:
        zero["compute_grad_norm"] = True       # get_global_grad_norm() is what the adapter reports
    if "parameter_alignment" in release_zero_fields:
        zero["parameter_alignment"] = False    # no padding between parameters in the flat buffers
    return zero


def deepspeed_config(scenario: Scenario, world_size: int,
                     release_zero_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The config dict passed to deepspeed.initialize. fp32 only: no fp16 / bf16 sections (both default to
    disabled in every pinned release, which the worker asserts on the engine)."""
    if scenario.engine.precision != "full":
        raise ValueError(f"precision {scenario.engine.precision!r}: this config is fp32 only")
    g = scenario.engine.accumulation_steps
    mgn = scenario.max_grad_norm
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": g,
        "train_batch_size": g * world_size,
        "gradient_clipping": 0.0 if mgn is None else float(mgn),
        "prescale_gradients": False,
        "gradient_predivide_factor": 1.0,
        # No "sparse_gradients": false is the default up to 0.19.7, and 0.19.8 rejects the key (issue #8489); our
        # models have no nn.Embedding (tied_embedding is a plain Parameter), so nothing reads it.
        "zero_optimization": zero_section(scenario, release_zero_fields),
        "zero_allow_untested_optimizer": True,   # torch.optim.SGD is not on ZeRO's tested list
        "zero_force_ds_cpu_optimizer": False,    # offload keeps our torch.optim optimizer (no native CPU Adam)
        "wall_clock_breakdown": False,
        "memory_breakdown": False,
        "dump_state": False,
        "steps_per_print": NEVER,
    }


def expected_engine_state(scenario: Scenario) -> dict[str, Any]:
    """What the engine's accessors must return once built from deepspeed_config(scenario)."""
    mgn = scenario.max_grad_norm
    return {
        "gradient_accumulation_steps": scenario.engine.accumulation_steps,
        "gradient_clipping": 0.0 if mgn is None else float(mgn),
        "zero_optimization_stage": scenario.engine.zero_stage,
        "fp16_enabled": False,
        "bfloat16_enabled": False,
        "zero_cpu_offload": scenario.engine.offload,
    }
