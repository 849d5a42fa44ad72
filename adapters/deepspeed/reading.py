"""How the DeepSpeed adapters read what DeepSpeed's optimizer consumed: where each parameter lies in ZeRO's flat
partitions, the gradient layout hook, and the engine and config checks. Shared by adapters/deepspeed/worker.py
(DeepSpeed driven directly) and adapters/transformers/trainer_run.py (the Trainer over DeepSpeed); worker.py's
docstring says why each reading is what the optimizer consumed. It imports torch and DeepSpeed only inside
functions, and no release loader: importing it loads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class FlatEntry:
    """Where a parameter lies in DeepSpeed's flat buffer of its group."""

    name: str
    offset: int
    numel: int
    shape: tuple[int, ...]
    # ZeRO-3 partitions each parameter on its own: rank r holds elements [r P, (r + 1) P) of it (the last rank's
    # share padded), at `offset` in its flat partition; P is this. 0 for ZeRO-1/2, whose ranks cut one flat
    # buffer, so that a parameter lies at `offset` in the concatenation of the W partitions.
    partition_numel: int = 0

    def cut(self, full: Any, partition: int, world_size: int) -> Any:
        """This parameter out of the W flat partitions (each `partition` elements) concatenated in rank order."""
        if not self.partition_numel:
            return full[self.offset:self.offset + self.numel].reshape(self.shape)
        import torch

        pieces = [full[r * partition + self.offset:r * partition + self.offset + self.partition_numel]
                  for r in range(world_size)]
        return torch.cat(pieces)[:self.numel].reshape(self.shape)


def canonical_layout(grad: Any) -> Any:
    """A gradient with the strides of a freshly allocated tensor of its shape. The kit keeps biases as [O, 1]
    matrices and computes with their transpose, so autograd hands DeepSpeed a [O, 1] gradient with strides (1, O):
    contiguous by torch's rule (size-1 dimensions do not count), so DeepSpeed's flatten of a one-tensor bucket
    aliases it, and the copy back in engine.allreduce_and_copy (ZeRO-0, two ranks) raises on the overlap. A real
    model's 1-D bias never has that layout. The values are untouched; only the memory layout is made ordinary."""
    import torch

    if grad.stride() == torch.empty(grad.shape, device="meta").stride():
        return grad
    return grad.clone(memory_format=torch.contiguous_format)


def zero12_layout(zero: Any, param_names: dict[int, str], world_size: int) -> list[tuple[Any, list[FlatEntry], int]]:
    """Where each parameter lies in ZeRO-1/2's flat buffers, one per parameter group: the model's parameters are
    views into bit16_groups_flat[i], so a parameter's offset is read from its storage address; this rank's fp32
    partition (single_partition_of_fp32_groups[i], the tensor the torch.optim optimizer steps) is 1/W of it."""
    layout = []
    for i, flat in enumerate(zero.bit16_groups_flat):
        entries = []
        for p in zero.bit16_groups[i]:
            offset, rem = divmod(p.data_ptr() - flat.data_ptr(), p.element_size())
            if rem or not 0 <= offset <= flat.numel() - p.numel():
                raise RuntimeError(f"parameter {param_names[id(p)]} is not a view of its flat buffer")
            entries.append(FlatEntry(param_names[id(p)], offset, p.numel(), tuple(p.shape)))
        partition = flat.numel() // world_size
        part = zero.single_partition_of_fp32_groups[i]
        if part.numel() != partition:
            raise RuntimeError(f"fp32 partition of group {i} has {part.numel()} elements, expected {partition}")
        layout.append((part, entries, partition))
    return layout


def stage3_layout(zero: Any, param_names: dict[int, str]) -> list[tuple[Any, list[FlatEntry], int]]:
    """Where each parameter lies in ZeRO-3's fp32 flat partitions, one per optimizer sub-group
    (fp32_partitioned_groups_flat[i], the tensor the torch.optim optimizer steps, its .grad set from
    averaged_gradients just before). DeepSpeed's own map, grad_position[param id] = [sub-group, offset, partition
    numel], is what it cuts the flat gradient by (get_fp32_grad_partitions), the same in every pinned release."""
    layout = []
    for i, group in enumerate(zero.fp16_groups):
        part = zero.fp32_partitioned_groups_flat[i]
        entries = []
        for p in group:
            sub_group, offset, partition_numel = zero.grad_position[zero.get_param_id(p)]
            name = param_names[id(p)]
            if sub_group != i or partition_numel != p.partition_numel() or offset + partition_numel > part.numel():
                raise RuntimeError(f"parameter {name}: grad_position {[sub_group, offset, partition_numel]} does not "
                                   f"fit sub-group {i} of {part.numel()} elements")
            entries.append(FlatEntry(name, offset, p.ds_numel, tuple(p.ds_shape), partition_numel))
        if sum(e.partition_numel for e in entries) != part.numel():
            raise RuntimeError(f"fp32 partition of sub-group {i} has {part.numel()} elements, its parameters "
                               f"{sum(e.partition_numel for e in entries)}")
        layout.append((part, entries, part.numel()))
    return layout


def engine_refusal(scenario: Any) -> str | None:
    """Why DeepSpeed's engine cannot run `scenario` as the adapters over it declare, in the cases they share
    (adapters/deepspeed/worker.py, the DeepSpeed adapter; adapters/transformers/trainer_run.py, the Trainer over
    DeepSpeed), or None."""
    e, m = scenario.engine, scenario.model
    if e.zero_stage == 0 and e.offload:
        return "offload with ZeRO stage 0: DeepSpeed offloads the optimizer of ZeRO-1/2/3 only"
    if e.zero_stage == 0 and m.has_experts:
        # ZeRO-0 steps through torch.optim directly, which skips a parameter without .grad: that is not the
        # flat-partition semantics (missing_gradient_is_zero) the adapters declare.
        return ("routed experts with ZeRO stage 0: torch.optim would skip an expert without a gradient, against "
                "missing_gradient_is_zero")
    if not any(not m.is_frozen(n) for n in m.parameter_names()):
        return "no trainable parameter: DeepSpeed cannot build an optimizer over nothing"
    return None


def zero_fields(ds: Any) -> frozenset[str]:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return frozenset(DeepSpeedZeroConfig.model_fields)


def bf16_fields(ds: Any) -> frozenset[str]:
    """DeepSpeedBF16Config's field names (0.17+); empty where the release parses the bf16 section as a dict."""
    try:
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config
    except ImportError:
        return frozenset()
    return frozenset(DeepSpeedBF16Config.model_fields)


def check_engine(engine: Any, expected: dict[str, Any]) -> None:
    """The knobs ds_config pinned, read back from the engine: a release that ignored one is refused."""
    for accessor, want in expected.items():
        got = getattr(engine, accessor)()
        if got != want:
            raise RuntimeError(f"engine.{accessor}() is {got!r}, the adapter configured {want!r}")
