"""Config dataclasses and the flat trial config.

A trial is described by one flat dict: ``model`` and ``task`` names, plus the
fields of :class:`TrainConfig`, of the model's config dataclass and of the
task's config dataclass. A key name means one thing (:func:`claim_keys`, run
when a registry entry is added): a key belongs to one group (training, model or
task configs), and where two models (or two tasks) share a key it has the same
type in both. So a sweep spec or ``--set chunk_size=20`` never needs to say
which dataclass a key belongs to. Every config is a pydantic dataclass: types
and ranges are validated at construction, unknown keys are an error naming the
closest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
import weakref
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from rirlab.errors import UserError

STRICT = ConfigDict(extra="forbid", validate_assignment=True)


# A recipe is a preset of the training fields below that are left unset (None); a value set explicitly wins.
# "adamw": AdamW, the warm-up / lr_decay schedule per step, a fixed number of steps, every split evaluated with
#   the weights of the last step (this project's original behaviour).
# "paper": what the RIR and EBT papers' public code runs for ListOps and logical inference (the papers say their
#   hyperparameters follow BT-RvNN's): Ranger (RAdam + Lookahead; rirlab/optim.py), ReduceLROnPlateau
#   (factor 0.5, patience 2) stepped once per epoch on the dev score, early stopping after 4 epochs without dev
#   improvement (the code stops when its counter exceeds the patience), batches from length buckets of 5
#   batches, gradient-norm clip 1, S4D parameters in their own group with lr min(1e-3, lr), and every test split
#   evaluated with the best-dev weights (dev accuracy for RIR-EBT-GRC / RIR-GRC, dev loss for the others: each
#   model's ``select_by`` in its @register, rirlab.models.registry), and a pool's batches trained one after
#   another (batch_order "pools", their collater and trainer). The training length stays `steps` /
#   `epochs` (the specs set epochs: 100).
RECIPES: dict[str, dict[str, Any]] = {
    "adamw": {"optimizer": "adamw", "scheduler": "schedule", "grad_clip": 5.0, "bucket_factor": 1,
              "batch_order": "shuffled", "early_stop_patience": 0, "select_by": "last", "s4d_lr_cap": 0.0},
    "paper": {"optimizer": "ranger", "scheduler": "plateau", "grad_clip": 1.0, "bucket_factor": 5,
              "batch_order": "pools", "early_stop_patience": 4, "select_by": "auto", "s4d_lr_cap": 1e-3},
}


# Config keys that change only how a trained model is evaluated, never its training or its weights: what an
# evaluation-only row of a spec (a variant with ``evaluates:``) may set. The inference mode and eval-mode alignment of
# the RIR models (RIR App. D), a beam model's beam width, the evaluation batches and splits, the threads and device.
EVALUATION_KEYS = ("inference", "eval_alignment", "beam_size", "eval_batch_size", "max_eval_examples", "eval_splits",
                   "imported", "num_threads", "device")


@dataclass(config=STRICT)
class TrainConfig:
    """Optimisation settings shared by every model (defaults: the papers' ListOps settings).

    ``recipe`` fills every field of ``RECIPES`` left at None (see there); the filled values are what a trial
    logs as its params.
    """

    seed: int = Field(0, ge=0)
    recipe: Literal["adamw", "paper"] = "adamw"
    optimizer: Optional[Literal["adamw", "ranger"]] = None
    lr: float = Field(1e-3, gt=0, le=1.0)
    weight_decay: float = Field(1e-2, ge=0)
    adam_beta1: float = Field(0.9, ge=0, lt=1)  # AdamW betas (the dynamic-halt paper's code: 0.9, 0.98)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_eps: float = Field(1e-8, gt=0, lt=1)  # AdamW eps (the dynamic-halt code's LRA Image configs: 1e-9)
    # Ranger's eps (recipe "paper"): 1e-8, the Ranger class of the RIR/EBT authors' public code (BeamRecursionFamily,
    # optimizers/ranger.py; their agents pass no eps). Records trained before 2026-12-06 used 1e-5 (rirlab had taken
    # lessw2020's Ranger default): with gradients of about 1e-5 and below, late in training, 1e-5 shrinks the steps.
    ranger_eps: float = Field(1e-8, gt=0, lt=1)
    batch_size: int = Field(128, ge=1)
    # examples per forward/backward: a batch of batch_size runs as micro-batches of this many, each padded on its own,
    # their gradients summed (each loss weighted by its share of the batch) into one optimiser step, as the
    # dynamic-halt code's train_batch_size within batch_size (its LRA Retrieval TLB/GUTLB: 32 within 128); None =
    # the whole batch at once
    micro_batch_size: Optional[int] = Field(None, ge=1)
    eval_batch_size: int = Field(128, ge=1)
    steps: int = Field(20000, ge=1)
    epochs: Optional[int] = Field(None, ge=1)  # when set, overrides steps (epochs x batches per epoch)
    log_every: int = Field(50, ge=1)
    eval_every: int = Field(1000, ge=1)
    grad_clip: Optional[float] = Field(None, ge=0)  # gradient-norm clip; 0 = none
    # "schedule": warm-up_steps then lr_decay, per step; "plateau": ReduceLROnPlateau on the dev score per epoch
    scheduler: Optional[Literal["schedule", "plateau"]] = None
    warmup_steps: int = Field(0, ge=0)  # linear warm-up of the learning rate (scheduler: schedule)
    # after warm-up: none, linear / cosine down to 0 at the last step, or inverse_sqrt: sqrt(warmup / step), which
    # peaks at lr; root_warmup is the dynamic-halt paper's code's "rootwarmup" schedule,
    # lr * min(1, step / warmup) / sqrt(max(step, warmup)) (step from 1), whose peak is lr / sqrt(warmup_steps):
    # its configs write lr 0.05 with 1,000 warm-up steps, a peak of 1.6e-3 (rirlab.train.Trainer.lr_factor);
    # one_cycle is that code's "linearwarmup", torch's OneCycleLR with linear annealing: lr / 25 rising to lr
    # over warmup_steps, then down to lr / 2.5e5 at the last step, while Adam's beta1 goes 0.95 -> 0.85 -> 0.95
    # (OneCycleLR cycles momentum by default); its flip-flop runs used it
    lr_decay: Literal["none", "linear", "cosine", "inverse_sqrt", "root_warmup", "one_cycle"] = "none"
    plateau_factor: float = Field(0.5, gt=0, lt=1)  # scheduler plateau: lr *= factor ...
    plateau_patience: int = Field(2, ge=0)  # ... after this many epochs without dev improvement beyond these
    early_stop_patience: Optional[int] = Field(None, ge=0)  # stop once this many epochs passed without improvement
    # (the counter must exceed it, as in the papers' code); 0 = never stop early
    # steps between dev evaluations that also select the weights and count towards early stopping, besides the
    # epoch ends (the dynamic-halt code evaluates dev every `chunk_size` training examples: 1,000 steps on
    # flip-flop, an epoch of 10,000); None = at epoch ends only
    dev_every: Optional[int] = Field(None, ge=1)
    select_by: Optional[Literal["last", "accuracy", "loss", "auto"]] = None  # weights the test splits see: the
    # last step's, or the epoch with the best dev accuracy / dev loss; auto: per model (its registry entry)
    s4d_lr_cap: Optional[float] = Field(None, ge=0)  # S4D kernel params get lr min(cap, lr); 0 = no own group
    s4d_weight_decay: Optional[float] = Field(None, ge=0)  # their weight decay; None = weight_decay (papers' code)
    device: Literal["cpu", "cuda", "auto"] = "auto"
    # bf16: the forward under bfloat16 autocast (rirlab.models.base.autocast); beam scores, the scorer, softmaxes,
    # marginalisation and halting stay fp32 inside the models; the loss is computed in fp32; no grad scaler needed.
    # fp16: the same under float16 autocast with a dynamic grad scaler (torch.amp.GradScaler; gradients unscaled
    # before clipping, a step with inf/NaN gradients skipped), as the dynamic-halt paper's code trained (CUDA; CPU
    # runs it too, slowly)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    max_eval_examples: Optional[int] = Field(None, ge=1)
    num_threads: int = Field(0, ge=0)
    bucket_factor: Optional[int] = Field(None, ge=1)  # >1: batches from length-sorted pools of this many batches
    # the order of an epoch's training batches (rirlab.tasks.batching.BatchPlan): "pools", a pool's batches in a
    # random order one after another (the RIR/EBT authors' collater and trainer; recipe "paper"); "shuffled", all
    # the epoch's batches shuffled together (recipe "adamw"; every record trained before 2026-12-07)
    batch_order: Optional[Literal["pools", "shuffled"]] = None
    num_workers: int = Field(0, ge=0)  # torch DataLoader worker processes collating training batches

    def __post_init__(self):
        for key, value in RECIPES[self.recipe].items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        if self.micro_batch_size is not None and self.micro_batch_size > self.batch_size:
            raise UserError(f"micro_batch_size {self.micro_batch_size} exceeds batch_size {self.batch_size}: set it "
                            f"to at most batch_size (or drop it to run whole batches)")
        if self.scheduler == "plateau" and (self.warmup_steps or self.lr_decay != "none"):
            raise UserError(f"scheduler=plateau steps the lr on the dev score; warmup_steps={self.warmup_steps} / "
                            f"lr_decay={self.lr_decay!r} belong to scheduler=schedule: set one or the other")
        if self.lr_decay == "one_cycle" and (self.optimizer != "adamw" or not self.warmup_steps):
            raise UserError(f"lr_decay=one_cycle cycles AdamW's beta1 over warmup_steps: it needs optimizer=adamw "
                            f"(not {self.optimizer}) and warmup_steps >= 1 (not {self.warmup_steps})")

    @property
    def per_epoch_dev(self) -> bool:
        """Whether the trainer evaluates dev at every epoch end (for the plateau scheduler, selection or stopping)."""
        return self.scheduler == "plateau" or self.select_by != "last" or self.early_stop_patience > 0 \
            or self.dev_every is not None


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def closest(key: str, candidates) -> str:
    match = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.5)
    return f" (did you mean {match[0]}?)" if match else ""


def parse_overrides(pairs) -> dict[str, Any]:
    """``--set key=value`` pairs; values are parsed as YAML with the safe loader (20 -> int, true -> bool,
    [1, 2] -> list). Anything wrong (no ``=``, an empty key, a key given twice, a value that is not plain YAML,
    such as ``!!python/object`` tags) is a one-line UserError that names the ``--set`` argument."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise UserError(f"--set {pair!r}: expected key=value, e.g. --set chunk_size=20")
        key, value = (part.strip() for part in pair.split("=", 1))
        if not key:
            raise UserError(f"--set {pair!r}: the key before '=' is empty; e.g. --set chunk_size=20")
        if key in out:
            raise UserError(f"--set {key} is given twice; keep one")
        out[key] = _override_value(pair, value)
    return out


def _override_value(pair: str, value: str):
    if not value:
        return ""
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"--set {pair!r}: the value is not valid YAML ({problem}); give a number, true/false, a "
                        f"string or a list such as [1, 2], and quote it for the shell") from None
    if any(isinstance(v, int) and abs(v) > 2**63 - 1 for v in (parsed if isinstance(parsed, list) else [parsed])):
        raise UserError(f"--set {pair!r}: the number is beyond 64 bits (torch, numpy and MLflow hold at most "
                        f"{2**63 - 1}); give a smaller one")
    return parsed


def build(cls, values: dict[str, Any], what: str):
    """Construct ``cls`` from ``values``; an unknown key or a bad value raises UserError naming it and the rule."""
    allowed = field_names(cls)
    unknown = [k for k in values if k not in allowed]
    if unknown:
        raise UserError(f"{what}: unknown parameter '{unknown[0]}'{closest(unknown[0], allowed)}; "
                        f"{cls.__name__} has {', '.join(allowed)}", key=unknown[0])
    try:
        return cls(**values)
    except ValidationError as err:
        e = err.errors()[0]
        msg = e["msg"].removeprefix("Value error, ")
        loc = ".".join(str(p) for p in e["loc"])
        if not loc:  # a rule across fields (a model validator): its message names them
            raise UserError(f"{what}: {msg}") from None
        got = values.get(loc, e.get("input"))
        raise UserError(f"{what}: {loc}={got!r} is invalid: {msg}", key=loc) from None
    except TypeError as err:  # unexpected keyword argument
        raise UserError(f"{what}: {err}") from None


# --- a key name means one thing ---

GROUPS = {"train": "training config", "model": "model config", "task": "task config"}
_claims: dict[str, list[tuple[str, type, str]]] = {}  # key -> (group, config class, owner) of each class with the key


_hints: "weakref.WeakKeyDictionary[type, dict]" = weakref.WeakKeyDictionary()


def _type_hints(cls) -> Optional[dict]:
    """``typing.get_type_hints(cls)``, kept per class (it evaluates every annotation of the class and its bases: the
    registries' shared keys asked it ~3,000 times in every process that loads them, most of a second of CPU); None
    where an annotation does not resolve (yet: asked again next time)."""
    hints = _hints.get(cls)
    if hints is None:
        try:
            hints = _hints[cls] = typing.get_type_hints(cls)
        except NameError:
            return None
    return hints


def _key_type(cls, key: str):
    """The field's type with Optional removed (None as "use the default" does not change what a key means)."""
    hints = _type_hints(cls)
    if hints is not None:
        hint = hints.get(key, Any)
    else:  # an annotation that does not resolve: compare its text
        hint = next(f.type for f in dataclasses.fields(cls) if f.name == key)
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = tuple(a for a in typing.get_args(hint) if a is not type(None))
        hint = args[0] if len(args) == 1 else Union[args]
    return hint


def _type_name(hint) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _who(group: str, cls: type, owner: str) -> str:
    return f"{cls.__name__} ({GROUPS[group]}{' of ' + repr(owner) if owner else ''})"


def claim_keys(group: str, cls: type, owner: str = "") -> None:
    """Record that config class ``cls`` of ``group`` ("train", "model" or "task") uses its field names as flat keys.

    Raises UserError, recording nothing, when a key is already a field of a class of another group (the flat
    key could not be routed to one dataclass) or of another class of the same group with another type.
    ``owner``, the registered name, only makes the message clearer.
    """
    if group not in GROUPS:
        raise ValueError(f"unknown config group {group!r}; one of {', '.join(GROUPS)}")
    for key in field_names(cls):
        for other_group, other, other_owner in _claims.get(key, ()):
            if other_group == group and other is cls:
                continue
            me, them = _who(group, cls, owner), _who(other_group, other, other_owner)
            if other_group != group:
                raise UserError(f"config key '{key}' is a field of both {me} and {them}: a flat key must have "
                                f"one owner; rename the field in one of them")
            mine, theirs = _key_type(cls, key), _key_type(other, key)
            if mine != theirs:
                raise UserError(f"config key '{key}' is {_type_name(mine)} in {me} but {_type_name(theirs)} in "
                                f"{them}: a key must mean one thing; rename it in one of them (or use one type)")
    for key in field_names(cls):
        if not any(g == group and c is cls for g, c, _ in _claims.get(key, ())):
            _claims.setdefault(key, []).append((group, cls, owner))


def release_keys(cls: type) -> None:
    """Forget ``cls``'s claims (its registry entry was removed, e.g. at the end of a test)."""
    for key in list(_claims):
        _claims[key] = [claim for claim in _claims[key] if claim[1] is not cls]
        if not _claims[key]:
            del _claims[key]


claim_keys("train", TrainConfig)
