"""One run request through the REAL `transformers.Trainer` training loop (CPU; one process, or this process as one
rank of several when worker.py sets RANK and WORLD_SIZE; over a real DeepSpeed release, one rank, when adapter.py is
given --deepspeed: DEEPSPEED, StepReading and docs/transformers-adapter.md "Over DeepSpeed").

Upstream code that runs (the release loaded by release.py, unmodified): `TrainingArguments` and `Trainer`
construction (its Accelerator and GradientAccumulationPlugin, from the pinned accelerate), `Trainer.train` ->
`_inner_training_loop`: the accumulation loop over the dataloader, `training_step`, `compute_loss` (which passes
`num_items_in_batch` to the model where the release does), the per-window count of `labels != -100`
(`get_batch_samples` / `_get_num_items_in_batch`, 4.46+), `accelerator.backward` (with its `/ G` where the release
configures accelerate's accumulation: 4.45), the boundary test (`total_batched_samples % G == 0`), clipping through
`accelerator.clip_grad_norm_` when `max_grad_norm > 0`, `optimizer.step()` through accelerate's
`AcceleratedOptimizer`, `lr_scheduler.step()` and `model.zero_grad()`; torch 2.6.0 autograd and torch.optim.
What each pinned release does with the loss, read in its source (.venv/transformers/X.Y.Z/transformers/trainer.py):
  4.45.2  compute_loss(model, inputs) calls model(**inputs) without num_items_in_batch: each micro-batch's loss is
          its own token mean; accelerator.backward divides it by G (the Trainer gives accelerate num_steps = G).
  4.46.3  get_batch_samples counts labels.ne(-100) over the window's G batches and, because the model's forward
          takes `**loss_kwargs` (model_accepts_loss_kwargs: a VAR_KEYWORD parameter named exactly loss_kwargs),
          compute_loss passes it as num_items_in_batch; accelerate is created without num_steps (no / G), and
          training_step divides nothing: the window's losses sum to its token mean. (A forward with `**kwargs`
          instead would get no count and nothing divided: G times the mean of micro-batch means.)
  5.24.0  the same count (`_get_num_items_in_batch`, unshifted labels: the model is not a causal LM), passed when
          the forward has any `**` parameter; training_step divides by the window's batch count only when the loss
          was not normalised by num_items_in_batch.
On several ranks: the same, with the count of this rank's window or of every rank's (average_tokens_across_devices,
at the release's default: off in 4.46.3, on in 5.24.0, which then multiplies the loss by the process count), under
DDP's average (worker.py).
Ours: the model (AccumcheckModel, a tiny PreTrainedModel with its tiny config, wrapping the kit's synthetic model;
no hub download, no tokenizer), the dataset (item (w G + k) R + r = micro-batch k of window w on rank r, as an index
and its labels: 0 where loss_mask is 1, -100 where 0; accelerate's sharding hands rank r every R-th item), the
collator (batch size 1, the item itself), the sequential sampler (_get_train_sampler overridden: a SequentialSampler
in every release; the signature changed in 4.5x, the override takes any arguments), the torch.optim optimizer of the
kit with a constant LambdaLR handed in through `optimizers=`, and the reading of what the optimizer consumed (a step
pre-hook, as adapters/deepspeed/worker.py). A framework on top of the Trainer (FRAMEWORK: LLaMA-Factory's or TRL's
trainer class) may ask for more of the model's outputs (Framework.language_model_outputs): each item then also
carries an attention_mask of ones, and the model returns constant zero logits over a one-entry vocabulary beside the
loss, outside its graph, for the framework's token metrics.

The model's loss follows Hugging Face's loss functions (`ForCausalLMLoss` / `fixed_cross_entropy`): the sum of the
valid tokens' losses divided by num_items_in_batch when the Trainer passes it, else by this micro-batch's valid-token
count (the mean `cross_entropy(ignore_index=-100)` takes). The per-token loss is the kit's l_t = 1/2 |W x_t + b -
y_t|^2 instead of a cross-entropy. One deviation, ours: a divisor of 0 (no valid token) gives loss 0 with zero
gradients where Hugging Face's 0/0 gives NaN, so that the check is about the Trainer's accumulation, and agrees with
our layer models and the oracle (a scope without a valid token has objective 0).

Checked on every run, else "failed": the model saw this rank's micro-batches exactly in order; the optimizer was
stepped exactly once per window; the number of items the Trainer counted (where it passed one) is the window's
valid-token count (this rank's, or every rank's with average_tokens_across_devices); the Trainer's global_step
equals the window count. Refused before the Trainer starts ("unsupported"): a rank count other than this process's
world (adapter.py routes them, and refuses several ranks over DeepSpeed), a window of other than G micro-batches, an
aggregation other than the token mean, checkpoints, and a micro-batch that reaches no trainable parameter (every
expert it routes to frozen, say: training_step's backward would raise on a loss without a graph).
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Sequence as Seq
from typing import Any

import torch
import transformers
from accumcheck_adapter import OptimizerStateReport, Result, RunRequest, StepReport, Unsupported, build_model
from accumcheck_adapter.loop import build_optimizer
from accumcheck_adapter.models import token_mask
from accumcheck_adapter.result import optimizer_state_report, parameter_report
from accumcheck_adapter.scenario import Sequence
from torch import nn
from torch.utils.data import Dataset, SequentialSampler

IGNORE_INDEX = -100  # what Hugging Face's losses and the Trainer's count skip
# The DeepSpeed module when the Trainer runs over a real DeepSpeed release (adapter.py --deepspeed), else None.
DEEPSPEED: Any = None
# This process's rank and the world's size: 0 and 1 in the adapter's own process; a rank of a gloo group of
# worker.py processes for scenarios of several ranks, which accelerate's MULTI_CPU state joins (worker.py).
RANK = 0
WORLD_SIZE = 1


class AccumcheckConfig(transformers.PretrainedConfig):
    """The tiny config of AccumcheckModel: nothing in it is read; it exists because a PreTrainedModel needs one."""

    model_type = "accumcheck-synthetic"


class AccumcheckModel(transformers.PreTrainedModel):
    """The kit's synthetic model as a Hugging Face model. forward(index, labels, **loss_kwargs) runs micro-batch
    `index` of the scenario and returns {"loss": ...} as Hugging Face models do (see the module docstring)."""

    config_class = AccumcheckConfig
    base_model_prefix = "synthetic"
    main_input_name = "index"

    def __init__(self, config: AccumcheckConfig, synthetic: nn.Module, micro_batches: list[list[Sequence]],
                 dtype: torch.dtype) -> None:
        super().__init__(config)
        self.synthetic = synthetic
        self.micro_batches = micro_batches
        self.compute_dtype = dtype
        self.seen: list[int] = []  # micro-batch indices in the order forward ran them
        self.language_model_outputs = False  # Framework.language_model_outputs
        self.counts: list[int | None] = []  # num_items_in_batch as each forward got it

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing to initialise: the parameters are the scenario's (checked after post_init)."""

    def forward(self, index: torch.Tensor, labels: torch.Tensor, **loss_kwargs: Any) -> dict[str, torch.Tensor]:
        k = int(index.reshape(-1)[0])
        self.seen.append(k)
        sequences = self.micro_batches[k]
        mask = labels.reshape(-1) != IGNORE_INDEX
        expected = token_mask(sequences, self.compute_dtype) != 0
        if not torch.equal(mask, expected):
            raise RuntimeError(f"micro-batch {k}: the labels the Trainer passed do not match its loss mask")
        losses = self.synthetic(sequences)  # [N] per-token losses, every token
        total = (losses * mask.to(losses.dtype)).sum()
        num_items = loss_kwargs.get("num_items_in_batch")
        self.counts.append(None if num_items is None else int(num_items))
        divisor = mask.sum() if num_items is None else num_items
        if int(divisor) == 0:
            loss = total * 0
        else:
            if isinstance(divisor, torch.Tensor):
                divisor = divisor.to(losses.dtype)
            loss = total / divisor
        if self.language_model_outputs:  # constant logits for a framework's token metrics, outside the graph
            return transformers.modeling_outputs.CausalLMOutput(
                loss=loss, logits=torch.zeros(mask.numel(), 1, dtype=losses.dtype))
        return {"loss": loss}


class MicroBatchDataset(Dataset):
    """Item j: micro-batch j of the scenario (windows in order, micro-batches in order), as its index and labels."""

    def __init__(self, micro_batches: list[list[Sequence]], attention_mask: bool = False) -> None:
        self.items = [{"index": torch.tensor([j]),
                       "labels": torch.tensor([0 if m else IGNORE_INDEX for seq in seqs for m in seq.loss_mask],
                                              dtype=torch.long)}
                      for j, seqs in enumerate(micro_batches)]
        if attention_mask:  # Framework.language_model_outputs
            for item in self.items:
                item["attention_mask"] = torch.ones_like(item["labels"])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, j: int) -> dict[str, torch.Tensor]:
        return self.items[j]


def unwrap(batch: Seq[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The collator: per_device_train_batch_size is 1, so a Trainer batch is one item, one micro-batch."""
    if len(batch) != 1:
        raise RuntimeError(f"the Trainer collated {len(batch)} items; expected 1")
    return dict(batch[0])


class KitOptimizer:
    """A Trainer mixin that hands the Trainer the kit's optimizer and the constant schedule where the Trainer builds
    its own: under DeepSpeed the Trainer refuses `optimizers=` and calls create_optimizer and create_scheduler
    itself (deepspeed_optim_sched, when the DeepSpeed config has no optimizer / scheduler section). Each sets the
    Trainer's attribute and then calls the class above it, which keeps what is set (the Trainer builds an AdamW and
    a linear decay only where the attribute is None; a framework's override, LLaMA-Factory's, runs too)."""

    accumcheck_optimizer: torch.optim.Optimizer | None = None
    accumcheck_scheduler: Any = None

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        if self.accumcheck_optimizer is not None:
            self.optimizer = self.accumcheck_optimizer
        optimizer = super().create_optimizer(*args, **kwargs)
        if self.accumcheck_optimizer is not None and optimizer is not self.accumcheck_optimizer:
            raise RuntimeError(f"the Trainer built {type(optimizer).__name__}, not the adapter's optimizer")
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> Any:
        if self.accumcheck_scheduler is not None:
            if optimizer is not None and optimizer is not self.accumcheck_optimizer:
                raise RuntimeError("the Trainer asked for a scheduler of an optimizer that is not the adapter's")
            self.lr_scheduler = self.accumcheck_scheduler
        return super().create_scheduler(num_training_steps, optimizer)


class SequentialTrainer(KitOptimizer, transformers.Trainer):
    """The release's Trainer with the kit's optimizer (KitOptimizer) and one method replaced: the training sampler
    is sequential, so that batch j of the epoch is micro-batch j of the scenario (the stock sampler is a
    RandomSampler)."""

    def _get_train_sampler(self, *args: Any, **kwargs: Any) -> torch.utils.data.Sampler:
        dataset = args[0] if args else kwargs.get("train_dataset", self.train_dataset)
        return SequentialSampler(dataset)


class Framework:
    """A framework built on the Trainer (adapters/llamafactory): what it changes about the run. trainer_run.FRAMEWORK
    is None for the plain Trainer."""

    name = "the Trainer"
    arguments_class: Any = None  # its TrainingArguments class

    def check_supported(self, request: RunRequest) -> None:
        """Refuses, with Unsupported, what the framework cannot run as the scenario says."""

    def deepspeed_config(self, request: RunRequest) -> Any:
        """The DeepSpeed config it hands the Trainer (a path or a dict)."""
        raise NotImplementedError

    def trainer(self, **kwargs: Any) -> transformers.Trainer:
        """Its Trainer, with KitOptimizer, built from the Trainer's keyword arguments."""
        raise NotImplementedError

    def check_stepped_optimizer(self, stepped: torch.optim.Optimizer, request: RunRequest) -> None:
        """Accepts an optimizer other than the kit's that the DeepSpeed engine steps (a framework that replaces
        it), or raises RuntimeError."""
        raise RuntimeError(f"{self.name}'s DeepSpeed engine steps {type(stepped).__name__}, not the adapter's "
                           "optimizer")

    def arguments(self) -> dict[str, Any]:
        """Fields of its TrainingArguments class set beyond the Trainer's (training_arguments)."""
        return {}

    def dataset(self, items: MicroBatchDataset) -> Any:
        """The train_dataset its trainer takes, holding `items` in order (a trainer that accepts only a `datasets`
        dataset converts them)."""
        return items

    # Whether its trainer reads a language model's outputs beside the loss (TRL's token metrics): then each item
    # also carries an attention_mask of ones and the model returns logits over a one-entry vocabulary
    # (AccumcheckModel.forward), which never enter the loss.
    language_model_outputs = False


def accelerate_keeps_adam_mode() -> bool:
    """Whether this accelerate builds DeepSpeedCPUAdam in Adam mode for a torch Adam: map_pytorch_optim_to_deepspeed
    (accelerate 1.7.0, 1.15.0) sets adamw_mode from the optimizer's class. accelerate 1.1.1 has no such function:
    Accelerator._prepare_deepspeed builds DeepSpeedCPUAdam(param_groups, lr=..., weight_decay=...), so at
    DeepSpeed's default adamw_mode=True every optimizer steps as AdamW, Adam's L2 weight decay as decoupled decay."""
    import accelerate.utils.deepspeed

    return hasattr(accelerate.utils.deepspeed, "map_pytorch_optim_to_deepspeed")


def check_cpu_adam(stepped: torch.optim.Optimizer, request: RunRequest) -> None:
    """For a framework whose DeepSpeed config makes accelerate step DeepSpeedCPUAdam in place of the Trainer's torch
    optimizer (zero_force_ds_cpu_optimizer at its default): accepts that optimizer over the kit's parameter groups
    with the scenario's hyperparameters and Adam's or AdamW's weight decay, or raises RuntimeError. Where accelerate
    steps Adam as AdamW (accelerate_keeps_adam_mode), an Adam scenario is accepted without weight decay only, where
    the two modes compute the same step (DeepSpeed's CPU Adam applies either decay only when it is positive)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    o = request.scenario.optimizer
    if not isinstance(stepped, DeepSpeedCPUAdam):
        raise RuntimeError(f"the DeepSpeed engine steps {type(stepped).__name__}, expected accelerate's "
                           "DeepSpeedCPUAdam")
    same_step = o.kind == "adam" and o.weight_decay == 0 and stepped.adam_w_mode and not accelerate_keeps_adam_mode()
    if stepped.adam_w_mode != (o.kind == "adamw") and not same_step:
        raise RuntimeError(f"DeepSpeedCPUAdam has adamw_mode {stepped.adam_w_mode} for a {o.kind} scenario")
    want = {"lr": float(o.lr), "betas": (float(o.beta1), float(o.beta2)), "eps": float(o.eps),
            "weight_decay": float(o.weight_decay), "bias_correction": True}
    for i, group in enumerate(stepped.param_groups):
        got = {k: (tuple(group.get(k)) if k == "betas" else group.get(k)) for k in want}
        if got != want:
            raise RuntimeError(f"DeepSpeedCPUAdam group {i} has {got}, the scenario {want}")


# A framework on top of the Trainer (adapters/llamafactory sets it), else None.
FRAMEWORK: Framework | None = None


def training_arguments(request: RunRequest, output_dir: str) -> transformers.TrainingArguments:
    """Every knob the run relies on, pinned; fields a release lacks are left out (named below)."""
    s = request.scenario
    max_norm = 0.0 if s.max_grad_norm is None else float(s.max_grad_norm)
    wanted: dict[str, Any] = {
        "output_dir": output_dir, "overwrite_output_dir": True,
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": s.engine.accumulation_steps,
        "max_steps": len(s.steps), "num_train_epochs": 1,
        "learning_rate": float(s.optimizer.lr), "lr_scheduler_type": "constant", "warmup_steps": 0,
        "weight_decay": float(s.optimizer.weight_decay), "max_grad_norm": max_norm,
        "seed": 0, "data_seed": None, "full_determinism": False,
        "use_cpu": True, "fp16": False, "bf16": False, "tf32": None, "torch_compile": False,
        "gradient_checkpointing": False, "label_smoothing_factor": 0.0,
        "dataloader_num_workers": 0, "dataloader_drop_last": False, "dataloader_pin_memory": False,
        "remove_unused_columns": False, "group_by_length": False, "past_index": -1,
        "logging_strategy": "no", "save_strategy": "no", "eval_strategy": "no", "report_to": "none",
        "disable_tqdm": True, "skip_memory_metrics": True, "include_num_input_tokens_seen": False,
        "load_best_model_at_end": False, "push_to_hub": False, "torch_empty_cache_steps": None,
        # The release's own default, stated: False up to 4.53.x, True from 4.54.0 (PR #39395). It decides whether
        # num_items_in_batch is this rank's count or every rank's (and the loss times the process count).
        "average_tokens_across_devices": release_default("average_tokens_across_devices"),
        # Several ranks (worker.py): DDP's own find_unused_parameters rule (None: True for a PreTrainedModel
        # without gradient checkpointing), a collective deadline below the adapter's; and gloo below.
        "ddp_timeout": 30, "ddp_find_unused_parameters": None,
    }
    if WORLD_SIZE > 1:
        # accelerate's MULTI_CPU state on gloo, not MPI or oneCCL where those are installed. On one process a
        # backend would make accelerate ask torch.distributed for a group that does not exist.
        wanted["ddp_backend"] = "gloo"
    if DEEPSPEED is not None:
        # use_cpu=True would take the Trainer off DeepSpeed (TrainingArguments._setup_devices gives a CPU state
        # precedence over `deepspeed`); DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, release.py) puts the run
        # on the CPU instead, and CUDA_VISIBLE_DEVICES="" leaves torch no GPU.
        wanted["use_cpu"] = False
        wanted["deepspeed"] = deepspeed_config(request) if FRAMEWORK is None else FRAMEWORK.deepspeed_config(request)
    if FRAMEWORK is not None:
        wanted.update(FRAMEWORK.arguments())
    cls = transformers.TrainingArguments if FRAMEWORK is None else FRAMEWORK.arguments_class
    accepted = set(inspect.signature(cls.__init__).parameters)
    return cls(**{k: v for k, v in wanted.items() if k in accepted})


def release_default(field: str) -> Any:
    """A TrainingArguments field's default in the loaded release (None where the release has no such field: the
    field is then left out)."""
    f = transformers.TrainingArguments.__dataclass_fields__.get(field)
    return None if f is None else f.default


def average_tokens_across_devices(trainer: transformers.Trainer) -> bool:
    """Whether the Trainer counts num_items_in_batch over every rank (TrainingArguments turns the flag off on one
    process)."""
    return bool(getattr(trainer.args, "average_tokens_across_devices", False))


def deepspeed_config(request: RunRequest) -> dict[str, Any]:
    """The DeepSpeed config the Trainer is given: the DeepSpeed adapter's, every knob pinned (ds_config.py), for
    one rank. No "auto" value: the Trainer's HfTrainerDeepSpeedConfig checks each given value against
    TrainingArguments (micro-batch size 1, G, the clipping norm, the batch size G) and refuses a mismatch."""
    import ds_config
    import reading

    return ds_config.deepspeed_config(request.scenario, 1, reading.zero_fields(DEEPSPEED),
                                      reading.bf16_fields(DEEPSPEED))


def check_supported(request: RunRequest) -> None:
    s = request.scenario
    e = s.engine
    if e.rank_count != WORLD_SIZE:  # adapter.py routes several ranks to worker.py, which runs without DeepSpeed
        raise Unsupported(f"{e.rank_count} ranks: this process is a rank of {WORLD_SIZE}")
    for w, window in enumerate(s.steps):
        if len(window) != e.accumulation_steps:
            raise Unsupported(f"window {w} has {len(window)} micro-batches, G = {e.accumulation_steps}: the Trainer "
                              "cuts the epoch into windows of G batches and only the epoch's last may be shorter")
    if s.aggregation.mode != "token-mean":
        raise Unsupported(f"aggregation {s.aggregation.mode!r}: the Trainer's losses are token means")
    if s.checkpoint_after_step is not None:
        raise Unsupported("checkpoints: resume_from_checkpoint is not driven by this adapter")
    if DEEPSPEED is None:
        if s.optimizer.missing_gradient_is_zero:
            raise Unsupported("missing_gradient_is_zero: torch.optim skips a parameter whose .grad is None")
        return
    # Over DeepSpeed: what the Trainer over it is read at here, then the refusals every adapter over DeepSpeed shares.
    if e.precision != "full":
        raise Unsupported(f"precision {e.precision!r}: the Trainer over DeepSpeed runs fp32 only here")
    if e.zero_stage not in (0, 1, 2):
        raise Unsupported(f"ZeRO stage {e.zero_stage}: the Trainer over DeepSpeed is read at ZeRO 0-2 here")
    import reading

    refusal = reading.engine_refusal(s)
    if refusal is not None:
        raise Unsupported(refusal)
    if FRAMEWORK is not None:
        FRAMEWORK.check_supported(request)


def run(request: RunRequest) -> Result:
    check_supported(request)
    s = request.scenario
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[request.dtype]
    # Item (w G + k) R + r of the epoch is micro-batch k of window w on rank r: accelerate shards a dataloader of
    # batch size 1 so that rank r gets batches r, R + r, 2 R + r, ... (BatchSamplerShard, split_batches off).
    micro_batches = [ranks[r] for window in s.steps for ranks in window for r in range(s.engine.rank_count)]
    mine = list(range(RANK, len(micro_batches), s.engine.rank_count))
    synthetic = build_model(s.model, s.initial_parameters, dtype)
    for j, seqs in enumerate(micro_batches):
        if not synthetic(seqs).requires_grad:
            # Trainer.training_step calls backward on every micro-batch's loss, which raises without a graph.
            g, r = s.engine.accumulation_steps, s.engine.rank_count
            raise Unsupported(f"micro-batch {j // r % g} of window {j // r // g} on rank {j % r} reaches no "
                              "trainable parameter: the Trainer's backward would raise")
    model = AccumcheckModel(AccumcheckConfig(), synthetic, micro_batches, dtype)
    model.post_init()
    for name, p in synthetic.named_parameters():  # post_init must have left the scenario's values alone
        want = torch.tensor(s.initial_parameters[name], dtype=dtype).reshape(p.shape)
        if not torch.equal(p.detach(), want):
            raise RuntimeError(f"post_init changed parameter {name}")
    optimizer = build_optimizer(s.optimizer, list(synthetic.parameters()))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    named = list(synthetic.named_parameters())
    observer = StepReading(request, named, optimizer)
    with tempfile.TemporaryDirectory(prefix="accumcheck-transformers-") as out:
        args = training_arguments(request, out)
        if DEEPSPEED is None:
            trainer = SequentialTrainer(model=model, args=args, train_dataset=MicroBatchDataset(micro_batches),
                                        data_collator=unwrap, optimizers=(optimizer, scheduler))
        else:
            import reading

            for p in synthetic.parameters():  # the DeepSpeed adapter's gradient layout hook (reading.py)
                if p.requires_grad:
                    p.register_hook(reading.canonical_layout)
            lm = FRAMEWORK is not None and FRAMEWORK.language_model_outputs
            model.language_model_outputs = lm
            items = MicroBatchDataset(micro_batches, lm)
            kwargs = {"model": model, "args": args, "data_collator": unwrap,
                      "train_dataset": items if FRAMEWORK is None else FRAMEWORK.dataset(items)}
            trainer = SequentialTrainer(**kwargs) if FRAMEWORK is None else FRAMEWORK.trainer(**kwargs)
            trainer.accumcheck_optimizer, trainer.accumcheck_scheduler = optimizer, scheduler
            trainer.add_callback(observer.callback())
        observer.trainer = trainer
        if getattr(trainer, "_loss_shifts_labels", False):
            raise RuntimeError("the Trainer counts shifted labels for this model; the items are not causal-LM rows")
        trainer.train()
    for hook in observer.hooks:
        hook.remove()

    g = s.engine.accumulation_steps
    if model.seen != mine:
        raise RuntimeError(f"the Trainer ran items {model.seen} on rank {RANK}, expected {mine} in order")
    if len(observer.applied) != len(s.steps) or trainer.state.global_step != len(s.steps):
        raise RuntimeError(f"the Trainer stepped the optimizer {len(observer.applied)} times (global_step "
                           f"{trainer.state.global_step}) for {len(s.steps)} windows")
    counted = range(s.engine.rank_count) if average_tokens_across_devices(trainer) else (RANK,)
    for w in range(len(s.steps)):
        valid = sum(seq.valid_token_count for ranks in s.steps[w] for r in counted for seq in ranks[r])
        for count in model.counts[w * g:(w + 1) * g]:
            if count is not None and count != valid:
                raise RuntimeError(f"window {w}: the Trainer passed num_items_in_batch {count}, the window has {valid}")
    reports = [StepReport(True, gradient, None, None) for gradient in observer.applied]
    result = Result(reports, parameter_report(named), observer.optimizer_state())
    engine = getattr(trainer, "deepspeed", None)
    if engine is not None and hasattr(engine, "destroy"):
        engine.destroy()
    return result


class StepReading:
    """What the optimizer consumed, read by a step pre-hook on the optimizer the Trainer steps (after accumulation,
    reduction, offload copies and clipping): the kit's torch.optim optimizer, or, where a framework's DeepSpeed
    config makes accelerate replace it (LLaMA-Factory's: DeepSpeedCPUAdam), the replacement, which attach() hooks
    once the engine exists and FRAMEWORK has checked it.
      - Without DeepSpeed, and over DeepSpeed ZeRO-0: the model's parameters, stepped by name.
      - Over DeepSpeed ZeRO-1/2: the optimizer steps the fp32 flat partition of each parameter group (one rank: the
        whole flat buffer); each parameter is cut out of it at its offset in DeepSpeed's flat buffer
        (reading.zero12_layout, the DeepSpeed adapter's reading), which is taken at the first step from the engine
        the Trainer built, after checking that the engine holds the knobs ds_config pinned and steps this
        optimizer. Every trainable parameter is stepped (a parameter without a gradient reads what the partition
        holds: zeros in a correct engine)."""

    def __init__(self, request: RunRequest, named: list[tuple[str, Any]], optimizer: torch.optim.Optimizer) -> None:
        self.request = request
        self.scenario = request.scenario
        self.named = named
        self.hooks = [optimizer.register_step_pre_hook(self.before_step)]
        self.optimizer = optimizer
        self.trainer: Any = None
        self.layout: list[Any] | None = None  # ZeRO-1/2: [(fp32 partition, [FlatEntry], partition size)]
        self.applied: list[dict[str, Any]] = []
        self.step_counts = {name: 0 for name in self.scenario.model.parameter_names()}

    def zero_layout(self) -> list[Any] | None:
        if DEEPSPEED is None or self.scenario.engine.zero_stage == 0:
            return None
        if self.layout is None:
            import ds_config
            import reading

            engine = self.trainer.deepspeed
            reading.check_engine(engine, ds_config.expected_engine_state(self.scenario))
            zero = engine.optimizer
            if getattr(zero, "optimizer", None) is not self.optimizer:
                raise RuntimeError(f"the Trainer's DeepSpeed engine steps {type(zero).__name__} over "
                                   f"{type(getattr(zero, 'optimizer', None)).__name__}, not the optimizer read")
            self.layout = reading.zero12_layout(zero, {id(p): n for n, p in self.named}, 1)
        return self.layout

    def callback(self) -> transformers.TrainerCallback:
        """The Trainer callback that calls attach() once the Trainer has built its DeepSpeed engine."""
        observer = self

        class AttachReading(transformers.TrainerCallback):
            def on_train_begin(self, *_args: Any, **_kwargs: Any) -> None:
                observer.attach()

        return AttachReading()

    def attach(self) -> None:
        """Over DeepSpeed ZeRO-1/2, the optimizer the engine steps is read: the kit's, or the one a framework's
        setup put in its place (accelerate's map_pytorch_optim_to_deepspeed under LLaMA-Factory's offload config),
        which FRAMEWORK must accept and which then gets the step pre-hook and is the optimizer whose state is
        reported."""
        if DEEPSPEED is None or self.scenario.engine.zero_stage == 0:
            return
        stepped = getattr(self.trainer.deepspeed.optimizer, "optimizer", None)
        if stepped is self.optimizer:
            return
        if FRAMEWORK is None or stepped is None:
            raise RuntimeError(f"the Trainer's DeepSpeed engine steps {type(stepped).__name__}, not the adapter's "
                               "optimizer")
        FRAMEWORK.check_stepped_optimizer(stepped, self.request)
        self.optimizer = stepped
        self.hooks.append(stepped.register_step_pre_hook(self.before_step))

    def by_name(self, read: Any) -> dict[str, Any]:
        """A report by parameter name of read(stepped tensor), a tensor or None; frozen parameters are None."""
        layout = self.zero_layout()
        if layout is None:
            out = {}
            for name, p in self.named:
                value = read(p)
                out[name] = None if value is None else value.detach().reshape(p.shape).tolist()
            return out
        out = {name: None for name, _ in self.named}
        for part, entries, partition in layout:
            value = read(part)
            if value is not None:
                for entry in entries:
                    out[entry.name] = entry.cut(value.detach().float(), partition, 1).tolist()
        return out

    def before_step(self, _optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        gradient = self.by_name(lambda t: t.grad)
        self.applied.append(gradient)
        layout = self.zero_layout()
        for name, p in self.named:
            if gradient[name] is not None if layout is None else p.requires_grad:
                self.step_counts[name] += 1

    def optimizer_state(self) -> Any:
        if self.zero_layout() is None:
            return optimizer_state_report(self.named, self.optimizer, self.step_counts)
        state = self.optimizer.state
        first_key = "momentum_buffer" if self.scenario.optimizer.kind == "sgd" else "exp_avg"
        report = OptimizerStateReport()
        report.first_moment = self.by_name(lambda t: state.get(t, {}).get(first_key))
        report.second_moment = self.by_name(lambda t: state.get(t, {}).get("exp_avg_sq"))
        report.step_count = dict(self.step_counts)
        for part, entries, _ in self.zero_layout() or []:
            step = state.get(part, {}).get("step")
            if step is not None:  # Adam / AdamW count the steps of the flat partition themselves
                for entry in entries:
                    report.step_count[entry.name] = int(step.item() if hasattr(step, "item") else step)
        return report


def warm_up_request(rank_count: int = 1) -> RunRequest:
    """A one-window run (linear model, G = 2, every rank the same sequences) that the adapter and each worker run
    once at start-up, before gc.freeze()."""
    from fractions import Fraction

    from accumcheck_adapter import ModelSpec, Scenario, engine_calls
    from accumcheck_adapter.scenario import Aggregation, EngineConfig, OptimizerSpec

    model = ModelSpec("linear", input_size=1, output_size=1, expert_count=1)
    steps = [[[[Sequence([1], [[1.0]], [[-1.0]])]] * rank_count,
              [[Sequence([1, 0], [[1.0], [1.0]], [[2.0], [0.0]])]] * rank_count]]
    scenario = Scenario(model, Aggregation("token-mean"), OptimizerSpec("sgd"), None,
                        EngineConfig(rank_count=rank_count, accumulation_steps=2), {"weight": [[0.0]], "bias": [[0.0]]},
                        {"weight": [[Fraction(0)]], "bias": [[Fraction(0)]]}, steps, None, 0)
    draft = RunRequest(0, "fp32", scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())


def zero2_offload_warm_up_request() -> RunRequest:
    """warm_up_request with what a framework's ZeRO-2 offload config fixes (LLaMA-Factory's, TRL's): ZeRO-2, offload,
    AdamW (accelerate steps DeepSpeedCPUAdam)."""
    import dataclasses

    from accumcheck_adapter import engine_calls

    draft = warm_up_request()
    s = draft.scenario
    scenario = dataclasses.replace(s, engine=dataclasses.replace(s.engine, zero_stage=2, offload=True),
                                   optimizer=dataclasses.replace(s.optimizer, kind="adamw"))
    return RunRequest.from_json(RunRequest(draft.id, draft.dtype, scenario, engine_calls(scenario)).to_json())


def describe() -> dict[str, Any]:
    """What this process runs, for the adapter's log."""
    import accelerate

    return {"transformers": transformers.__version__, "accelerate": accelerate.__version__, "torch": torch.__version__,
            "trainer": inspect.getsourcefile(transformers.Trainer)}


__all__ = ["AccumcheckConfig", "AccumcheckModel", "MicroBatchDataset", "SequentialTrainer", "check_supported",
           "describe", "run", "training_arguments", "unwrap"]
