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
    if e.zero_stage == 3:
        zero.update(stage3_section(release_zero_fields))
    # Fields of newer releases, pinned to the behaviour of the older ones.
    if "compute_grad_norm" in release_zero_fields:
        zero["compute_grad_norm"] = True       # get_global_grad_norm() is what the adapter reports
    if "parameter_alignment" in release_zero_fields:
        zero["parameter_alignment"] = False    # no padding between parameters in the flat buffers
    return zero


# ZeRO-3's own knobs: (config key, value). Most keys are aliases "stage3_*" of DeepSpeedZeroConfig fields; every
# release 0.15.1 - 0.19.8 knows these.
STAGE3_KNOBS: tuple[tuple[str, Any], ...] = (
    # Every parameter partitioned, none kept whole on every rank: the gradient the adapter reads is then the
    # reduce-scattered one of every parameter, however small (DeepSpeed's default keeps parameters below 1e5
    # elements, i.e. every parameter of the small models, unpartitioned).
    ("stage3_param_persistence_threshold", 0),
    ("stage3_model_persistence_threshold", 0),
    # No prefetch, and a fetched parameter released right after its module ran: each forward and backward
    # gathers exactly what it uses, in module order, whatever the trace cache recorded in earlier micro-steps.
    ("stage3_prefetch_bucket_size", 0),
    ("stage3_max_reuse_distance", 0),
    ("stage3_max_live_parameters", 10**9),   # DeepSpeed's default, never reached here
    # One optimizer sub-group per parameter group: the optimizer steps one fp32 flat partition per group.
    ("sub_group_size", 10**9),
    ("stage3_gather_16bit_weights_on_model_save", False),
    ("zero_hpz_partition_size", 1),     # no hierarchical (ZeRO++) partitioning
    ("memory_efficient_linear", True),  # the default; the models use no nn.Linear
    ("override_module_apply", True),
    ("pipeline_loading_checkpoint", False),
    ("stage3_use_all_reduce_for_fetch_params", False),
)
# (field name, config key, value) of the ZeRO-3 knobs that only some releases know, added where the release's
# DeepSpeedZeroConfig has the field (zero_fields lists field names), at the value that keeps the behaviour of the
# releases without it: MiCS (gone in 0.19.8), 0.16's module granularity, 0.17's sanity checks, 0.18's sequential
# all-gather.
STAGE3_RELEASE_KNOBS: tuple[tuple[str, str, Any], ...] = (
    ("mics_shard_size", "mics_shard_size", -1),
    ("mics_hierarchical_params_gather", "mics_hierarchical_params_gather", False),
    ("module_granularity_threshold", "stage3_module_granularity_threshold", 0),
    ("allgather_sequential", "stage3_allgather_sequential", False),
    ("log_trace_cache_warnings", "log_trace_cache_warnings", False),
    ("enable_sanity_checks", "enable_sanity_checks", False),
)


def stage3_section(release_zero_fields: frozenset[str]) -> dict[str, Any]:
    """The ZeRO-3 keys of zero_optimization: every STAGE3_KNOBS key, and those of STAGE3_RELEASE_KNOBS that the
    release knows. offload_param is left out: None (no parameter offload) in every pinned release, and the
    worker asserts the engine has none."""
    section = dict(STAGE3_KNOBS)
    section.update({key: value for field, key, value in STAGE3_RELEASE_KNOBS if field in release_zero_fields})
    return section


# The bf16 section's knobs: (field, value). "enabled" and "immediate_grad_update" are read by every pinned release
# (0.15 / 0.16 parse the section as a plain dict and ignore other keys; 0.17.6+ validate it against
# DeepSpeedBF16Config, which forbids unknown keys); the others are added where the release's DeepSpeedBF16Config
# has the field, at the behaviour of the releases without it: no overflow check (0.19.8 made it the default: a
# finite step is never skipped, but the check is not part of the fp32 path either), fp32 master weights,
# gradients and optimizer states (0.18's bf16 master weights off).
BF16_KNOBS: tuple[tuple[str, Any], ...] = (
    ("enabled", True),
    ("immediate_grad_update", False),
)
BF16_RELEASE_KNOBS: tuple[tuple[str, Any], ...] = (
    ("check_grad_overflow", False),
    ("bf16_master_weights_and_grads", False),
    ("bf16_optimizer_states", False),
)


def bf16_section(release_bf16_fields: frozenset[str]) -> dict[str, Any]:
    """The "bf16" section for precision bf16: BF16_KNOBS, and those of BF16_RELEASE_KNOBS the release knows
    (release_bf16_fields: DeepSpeedBF16Config's field names, empty for 0.15 / 0.16, which have no such model)."""
    section = dict(BF16_KNOBS)
    section.update({key: value for key, value in BF16_RELEASE_KNOBS if key in release_bf16_fields})
    return section


def deepspeed_config(scenario: Scenario, world_size: int,
                     release_zero_fields: frozenset[str] = frozenset(),
                     release_bf16_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The config dict passed to deepspeed.initialize. Precision "full": no fp16 / bf16 sections (both default to
    disabled in every pinned release, which the worker asserts on the engine). Precision "bf16": the bf16 section
    of bf16_section, fp16 disabled explicitly, and gradient accumulation in fp32 (data_types.grad_accum_dtype):
    bf16 parameters and gradients, fp32 master weights in the ZeRO optimizer's flat partitions."""
    precision = scenario.engine.precision
    if precision not in ("full", "bf16"):
        raise ValueError(f"precision {precision!r}: this config is fp32 or bf16 only")
    g = scenario.engine.accumulation_steps
    mgn = scenario.max_grad_norm
    config: dict[str, Any] = {
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
    if precision == "bf16":
        config["bf16"] = bf16_section(release_bf16_fields)
        config["fp16"] = {"enabled": False}
        config["data_types"] = {"grad_accum_dtype": "fp32"}
        # The dtype of ZeRO's gradient reductions across ranks: every pinned release defaults to the model's
        # (bf16) when the key is absent; pinned at that default.
        config["communication_data_type"] = "bf16"
    return config


def expected_engine_state(scenario: Scenario) -> dict[str, Any]:
    """What the engine's accessors must return once built from deepspeed_config(scenario)."""
    mgn = scenario.max_grad_norm
    return {
        "gradient_accumulation_steps": scenario.engine.accumulation_steps,
        "gradient_clipping": 0.0 if mgn is None else float(mgn),
        "zero_optimization_stage": scenario.engine.zero_stage,
        "fp16_enabled": False,
        "bfloat16_enabled": scenario.engine.precision == "bf16",
        "zero_cpu_offload": scenario.engine.offload,
    }
