"""The hyperparameters the reference engine implements: a closed vocabulary, checked at load time.

Every hyperparameter a benchmark spec or a submitter config names is logged by every run
(MLPerf's ``opt_*`` keys), so every one must be a value the run applies. A key outside this
vocabulary, or a value the engine does not implement, is refused when the spec or config is
loaded, in one line; nothing is logged that the run did not do.

Two naming families of MLPerf's logs name the same learning-rate schedule: ``dlrm`` (v0.7-v2.1:
``lr_decay_start_steps``, ``sgd_opt_learning_rate_decay_steps``,
``sgd_opt_learning_rate_decay_poly_power``) and ``dlrm_dcnv2`` (``opt_learning_rate_decay_start_step``,
``opt_learning_rate_decay_steps``); both give :func:`schedule_values`, the schedule
:mod:`harness.reference.engine.schedules` applies (both MLPerf references use the same policy).

``dlrmv4``'s recipe (ruleset 6.1.0, ``closed_dlrmv4.yaml``): ``opt_name: adam`` for the dense
parameters (``opt_adam_*``), the fused row-wise Adagrad for the tables (``opt_sparse_name``,
``opt_sparse_base_learning_rate``), the dense gradients clipped to ``opt_gradient_clip_norm``
before each step, a linear warmup from 0 (``opt_learning_rate_warmup_start_lr``). A value is
logged as MLPerf's rules spell it (:func:`logged_value`: ``opt_name`` ``adam`` is ``Adam``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import ErrorCategory, HarnessError


def _int_at_least(low: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
        return None if ok and v >= low else f"must be an integer >= {low}"
    return check


def _number(low: float, *, open_low: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return "must be a number"
        if v < low or (open_low and v == low):
            return f"must be {'>' if open_low else '>='} {low:g}"
        return None
    return check


def _one_of(*values: Any) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in values else f"must be one of {', '.join(map(repr, values))}"
    return check


def _only(value: Any, why: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v == value else f"only {value!r} is implemented ({why})"
    return check


def _fraction(v: Any) -> str | None:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v < 1
    return None if ok else "must be a number in [0, 1)"


@dataclass(frozen=True)
class Hyperparameter:
    key: str
    meaning: str
    check: Callable[[Any], str | None]
    optimizer: str | None = None  # the opt_name it applies to (None: any)


#: a value of a hyperparameter, as a spec or submitter config states it
HyperparameterValue = bool | int | float | str
#: a run's hyperparameters: names of :data:`VOCABULARY` (or their aliases), checked when the spec
#: or config is loaded (:func:`check_hyperparameters`), and their values
Hyperparameters = Mapping[str, HyperparameterValue]

VOCABULARY: dict[str, Hyperparameter] = {h.key: h for h in (
    Hyperparameter("global_batch_size", "samples per optimizer step, over all ranks", _int_at_least(1)),
    Hyperparameter("opt_name", "the optimizer of the dense and the embedding parameters", _one_of("adagrad", "sgd", "adam")),
    Hyperparameter("opt_base_learning_rate", "the learning rate before the schedule", _number(0, open_low=True)),
    Hyperparameter("sgd_opt_base_learning_rate", "dlrm's name of the same base learning rate",
                   _number(0, open_low=True)),
    Hyperparameter("opt_adagrad_learning_rate_decay", "Adagrad's lr / (1 + (t - 1) * decay), dense and sparse",
                   _number(0), optimizer="adagrad"),
    Hyperparameter("opt_weight_decay", "L2 weight decay",
                   _only(0, "torch's sparse Adagrad and the fused embedding optimizer have no weight decay")),
    Hyperparameter("opt_adagrad_initial_accumulator_value", "Adagrad's initial accumulator", _number(0),
                   optimizer="adagrad"),
    Hyperparameter("opt_adagrad_epsilon", "Adagrad's epsilon", _number(0, open_low=True), optimizer="adagrad"),
    Hyperparameter("opt_adam_beta_1", "Adam's beta1 (the dense parameters)", _fraction, optimizer="adam"),
    Hyperparameter("opt_adam_beta_2", "Adam's beta2 (the dense parameters)", _fraction, optimizer="adam"),
    Hyperparameter("opt_adam_epsilon", "Adam's epsilon (the dense parameters)", _number(0, open_low=True),
                   optimizer="adam"),
    Hyperparameter("opt_gradient_clip_norm", "the dense gradients' total L2 norm is clipped to this before each step",
                   _number(0, open_low=True)),
    Hyperparameter("opt_sparse_name", "the embedding tables' optimizer (fused into their backward pass), as "
                   "MLPerf names it", _one_of("RowWiseAdagrad"), optimizer="adam"),
    Hyperparameter("opt_sparse_base_learning_rate", "the embedding tables' learning rate before the schedule",
                   _number(0, open_low=True)),
    Hyperparameter("opt_learning_rate_warmup_steps", "steps of linear warmup", _int_at_least(0)),
    Hyperparameter("opt_learning_rate_warmup_start_lr", "the rate the linear warmup ramps from",
                   _only(0, "the warmup ramps linearly from 0, as both MLPerf recipes do")),
    Hyperparameter("opt_learning_rate_decay_start_step", "the step the polynomial decay starts at",
                   _int_at_least(0)),
    Hyperparameter("lr_decay_start_steps", "dlrm's name of the decay's first step", _int_at_least(0)),
    Hyperparameter("opt_learning_rate_decay_steps", "steps of polynomial decay", _int_at_least(0)),
    Hyperparameter("sgd_opt_learning_rate_decay_steps", "dlrm's name of the decay's steps", _int_at_least(0)),
    Hyperparameter("sgd_opt_learning_rate_decay_poly_power", "the decay's power (2 in both MLPerf references)",
                   _number(0, open_low=True)),
    Hyperparameter("gradient_accumulation_steps", "micro-batches per optimizer step",
                   _only(1, "the embedding optimizer is fused into the backward pass, so every backward is "
                            "a step")),
)}

_ALIASES = (  # (dcnv2's name, dlrm's name) of one value
    ("opt_base_learning_rate", "sgd_opt_base_learning_rate"),
    ("opt_learning_rate_decay_start_step", "lr_decay_start_steps"),
    ("opt_learning_rate_decay_steps", "sgd_opt_learning_rate_decay_steps"),
)


def check_hyperparameters(hp: Mapping[str, Any], *, what: str) -> None:
    """Refuse, in one line, a hyperparameter the engine does not implement as given.

    Raises:
        HarnessError: BAD_INPUT naming ``what``, the key and why.
    """
    for key in sorted(hp):
        entry = VOCABULARY.get(key)
        if entry is None:
            raise HarnessError(
                f"{what}: hyperparameter {key!r} is not implemented by the reference engine, so a log could not "
                f"truthfully state it; the engine implements: {', '.join(sorted(VOCABULARY))}",
                ErrorCategory.BAD_INPUT,
            )
        problem = entry.check(hp[key])
        if problem:
            raise HarnessError(f"{what}: {key} = {hp[key]!r}: {problem}", ErrorCategory.BAD_INPUT)
        if entry.optimizer is not None and hp.get("opt_name") != entry.optimizer:
            raise HarnessError(f"{what}: {key} applies to {entry.optimizer.capitalize()}, but opt_name is "
                               f"{hp.get('opt_name')!r}", ErrorCategory.BAD_INPUT)
    if hp.get("opt_name") == "adam" and "opt_sparse_name" not in hp:
        raise HarnessError(f"{what}: opt_name 'adam' is the dense parameters' optimizer; name the embedding tables' "
                           "with opt_sparse_name (RowWiseAdagrad)", ErrorCategory.BAD_INPUT)
    for a, b in _ALIASES:
        if a in hp and b in hp and float(hp[a]) != float(hp[b]):
            raise HarnessError(f"{what}: {a} = {hp[a]!r} and {b} = {hp[b]!r} name the same value but differ",
                               ErrorCategory.BAD_INPUT)
    s = schedule_values(hp)
    if s["decay_steps"] and s["decay_start_step"] < s["warmup_steps"]:
        raise HarnessError(
            f"{what}: the learning-rate decay starts at step {s['decay_start_step']}, before the "
            f"{s['warmup_steps']} warmup steps end (MLPerf's reference refuses this too)", ErrorCategory.BAD_INPUT,
        )


def schedule_values(hp: Mapping[str, Any]) -> dict[str, Any]:
    """The learning-rate schedule the hyperparameters give, under either naming family."""
    def first(*keys: str, default: Any = 0) -> Any:
        return next((hp[k] for k in keys if k in hp), default)

    return {
        "base_learning_rate": float(first("opt_base_learning_rate", "sgd_opt_base_learning_rate")),
        "sparse_base_learning_rate": float(first("opt_sparse_base_learning_rate", "opt_base_learning_rate",
                                                 "sgd_opt_base_learning_rate")),
        "warmup_steps": int(first("opt_learning_rate_warmup_steps")),
        "decay_start_step": int(first("opt_learning_rate_decay_start_step", "lr_decay_start_steps")),
        "decay_steps": int(first("opt_learning_rate_decay_steps", "sgd_opt_learning_rate_decay_steps")),
        "decay_power": float(first("sgd_opt_learning_rate_decay_poly_power", default=2)),
        "adagrad_lr_decay": float(first("opt_adagrad_learning_rate_decay")),
    }


# values MLPerf's rules spell otherwise than a spec does (closed_dlrmv4.yaml: opt_name == 'Adam')
_LOGGED_VALUES = {("opt_name", "adam"): "Adam"}


def logged_value(key: str, value: Any) -> Any:
    """The value of hyperparameter ``key`` as a log states it (MLPerf's spelling)."""
    return _LOGGED_VALUES.get((key, value), value)
