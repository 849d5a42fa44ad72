"""The DeepSpeed adapter's pinned config and capability check (adapters/deepspeed/ds_config.py, adapter.py), without
DeepSpeed: every knob the adapter relies on is set explicitly, from the scenario where the scenario decides it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from fractions import Fraction

import pytest
from conftest import ADAPTERS

sys.path.insert(0, str(ADAPTERS / "deepspeed"))

import catalogue
import ds_config

from accumcheck_adapter import Unsupported


def scenario(**engine):
    s = catalogue.request().scenario
    return dataclasses.replace(s, engine=dataclasses.replace(s.engine, **engine)) if engine else s


def test_every_accumulation_knob_is_pinned():
    c = ds_config.deepspeed_config(scenario(), world_size=1)
    assert c["gradient_accumulation_steps"] == 3
    assert (c["train_micro_batch_size_per_gpu"], c["train_batch_size"]) == (1, 3)
    assert c["gradient_clipping"] == 0.0  # 0.19.x made 1.0 the default
    assert "fp16" not in c and "bf16" not in c
    assert c["zero_allow_untested_optimizer"] is True and c["zero_force_ds_cpu_optimizer"] is False
    assert c["steps_per_print"] >= 2**31 - 1 and c["wall_clock_breakdown"] is False
    assert "sparse_gradients" not in c  # 0.19.8 rejects the key
    z = c["zero_optimization"]
    assert z["stage"] == 2
    assert z["overlap_comm"] is False and z["round_robin_gradients"] is False and z["contiguous_gradients"] is True
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": False, "buffer_count": 4, "fast_init": False,
                                      "ratio": 1.0}
    assert "compute_grad_norm" not in z and "parameter_alignment" not in z  # unknown to older releases


def test_clipping_world_size_and_offload_follow_the_scenario():
    s = dataclasses.replace(scenario(rank_count=2, offload=False, zero_stage=1), max_grad_norm=Fraction(1, 2))
    c = ds_config.deepspeed_config(s, world_size=2)
    assert c["gradient_clipping"] == 0.5 and c["train_batch_size"] == 6
    assert "offload_optimizer" not in c["zero_optimization"] and c["zero_optimization"]["stage"] == 1
    assert ds_config.expected_engine_state(s) == {
        "gradient_accumulation_steps": 3, "gradient_clipping": 0.5, "zero_optimization_stage": 1,
        "fp16_enabled": False, "bfloat16_enabled": False, "zero_cpu_offload": False}


def test_newer_release_fields_are_pinned_when_the_release_has_them():
    z = ds_config.zero_section(scenario(), frozenset({"compute_grad_norm", "parameter_alignment"}))
    assert z["compute_grad_norm"] is True and z["parameter_alignment"] is False


def test_zero3_partitions_every_parameter_and_pins_its_knobs():
    z = ds_config.zero_section(scenario(zero_stage=3))
    assert z["stage"] == 3
    assert z["stage3_param_persistence_threshold"] == 0 == z["stage3_model_persistence_threshold"]
    assert z["stage3_prefetch_bucket_size"] == 0 and z["stage3_max_reuse_distance"] == 0
    assert z["stage3_gather_16bit_weights_on_model_save"] is False and "offload_param" not in z
    assert z["offload_optimizer"]["device"] == "cpu"
    # Release-only fields: only where the release's DeepSpeedZeroConfig has them (0.19.8 has no MiCS).
    assert "mics_shard_size" not in z and "stage3_allgather_sequential" not in z
    fields = frozenset({"allgather_sequential", "module_granularity_threshold"})
    z = ds_config.zero_section(scenario(zero_stage=3), fields)
    assert z["stage3_allgather_sequential"] is False and z["stage3_module_granularity_threshold"] == 0
    assert "mics_shard_size" not in z
    assert "stage3_param_persistence_threshold" not in ds_config.zero_section(scenario(zero_stage=2))


def test_buckets_one_bucket_small_and_the_allgather_bucket_even():
    z = ds_config.zero_section(scenario())
    assert z["reduce_bucket_size"] == ds_config.ONE_BUCKET_ELEMENTS_MIN == z["allgather_bucket_size"]
    z = ds_config.zero_section(scenario(bucket_element_count=3))
    assert z["reduce_bucket_size"] == 3
    assert z["allgather_bucket_size"] % 2 == 0 and z["allgather_bucket_size"] >= ds_config.ONE_BUCKET_ELEMENTS_MIN


def test_fp16_is_refused_and_full_precision_has_no_16_bit_section():
    with pytest.raises(ValueError, match="fp32 or bf16 only"):
        ds_config.deepspeed_config(scenario(precision="fp16"), world_size=1)
    c = ds_config.deepspeed_config(scenario(), world_size=1)
    assert not {"bf16", "fp16", "data_types", "communication_data_type"} & set(c)
    assert ds_config.expected_engine_state(scenario())["bfloat16_enabled"] is False


def test_bf16_pins_fp32_accumulation_and_the_release_knobs():
    old = ds_config.deepspeed_config(scenario(precision="bf16"), world_size=1)   # 0.15 / 0.16: no config model
    assert old["bf16"] == {"enabled": True, "immediate_grad_update": False}
    assert old["fp16"] == {"enabled": False}
    assert old["data_types"] == {"grad_accum_dtype": "fp32"}
    assert old["communication_data_type"] == "bf16"
    fields = frozenset({"enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
                        "bf16_optimizer_states"})                                  # 0.18.9+
    new = ds_config.deepspeed_config(scenario(precision="bf16"), world_size=1, release_bf16_fields=fields)
    assert new["bf16"] == {"enabled": True, "immediate_grad_update": False, "check_grad_overflow": False,
                           "bf16_master_weights_and_grads": False, "bf16_optimizer_states": False}
    assert ds_config.expected_engine_state(scenario(precision="bf16"))["bfloat16_enabled"] is True
    assert ds_config.expected_engine_state(scenario(precision="bf16"))["fp16_enabled"] is False


def load_front():
    """adapters/deepspeed/adapter.py under a name of its own (other adapters' files are adapter.py too)."""
    spec = importlib.util.spec_from_file_location("deepspeed_front", ADAPTERS / "deepspeed" / "adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_capability_check_takes_the_flat_partition_semantics_whatever_the_scenario_flag():
    adapter = load_front()
    request = catalogue.request()
    as_generated = dataclasses.replace(request, scenario=dataclasses.replace(
        request.scenario, optimizer=dataclasses.replace(request.scenario.optimizer, missing_gradient_is_zero=False)))
    adapter.CAPABILITIES.check(as_generated)  # accumcheck sends the generated flag, false
    too_big = dataclasses.replace(request, scenario=dataclasses.replace(
        request.scenario, engine=dataclasses.replace(request.scenario.engine, precision="fp16")))
    with pytest.raises(Unsupported, match="precision"):
        adapter.CAPABILITIES.check(too_big)
    assert adapter.CAPABILITIES.to_json()["precisions"] == ["full", "bf16"]
    assert adapter.CAPABILITIES.to_json()["missing_gradient_is_zero"] is True
    assert adapter.CAPABILITIES.to_json()["zero_stages"] == [0, 1, 2, 3]
