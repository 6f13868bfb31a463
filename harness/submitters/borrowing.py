"""Hyperparameter borrowing, as the MLPerf Training rules allow it.

A submitter may take another submission's hyperparameters *as a group*; only the global
batch size may then differ. ``borrow`` reads the lender's hyperparameters (from the
lender's result logs or submitter config), checks that the lender itself only changed what
the benchmark lets a closed submission tune, and writes them into the borrower's config
with their provenance (the lender and the lender's fingerprint). Loading a config that
claims a borrow but changes anything other than the batch size is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from compliance.schemas import validate
from harness.errors import ErrorCategory, HarnessError
from harness.files import write_atomic
from harness.mllog import keys
from harness.mllog.reader import read_records
from harness.rules.fingerprint import fingerprint
from harness.rules.specs import BenchmarkSpec, load_benchmark

BATCH_SIZE = "global_batch_size"


def _hyperparameter_keys(spec: BenchmarkSpec) -> set[str]:
    return set(spec.reference_hyperparameters) | set(spec.tunable_hyperparameters)


def lender_from_logs(run_set_dir: Path) -> tuple[str, str, str, dict[str, Any]]:
    """(benchmark, lender, fingerprint, hyperparameters) from a lender's result logs.

    Every log of the set must log the same hyperparameters; the fingerprint is the logged
    ``harness_fingerprint`` when all logs carry the same one, else a hash of the values.
    """
    logs = sorted(Path(run_set_dir).glob("result_*.txt"))
    if not logs:
        raise HarnessError(f"{run_set_dir}: no result_*.txt logs to borrow from", ErrorCategory.NOT_FOUND)
    seen: list[tuple[str, str, str | None, dict[str, Any]]] = []
    for log in logs:
        records = [record for _, record in read_records(log)]
        values = {r["key"]: r.get("value") for r in records}
        benchmark = str(values.get(keys.SUBMISSION_BENCHMARK, ""))
        spec = load_benchmark(benchmark)
        hp = {k: values[k] for k in _hyperparameter_keys(spec) if k in values}
        lender = f"{values.get(keys.SUBMISSION_ORG, '?')}/{values.get(keys.SUBMISSION_PLATFORM, '?')}"
        seen.append((benchmark, lender, values.get(keys.HARNESS_FINGERPRINT), hp))
    benchmark, lender, fp, hp = seen[0]
    for other in seen[1:]:
        if other[3] != hp or other[0] != benchmark:
            raise HarnessError(f"{run_set_dir}: the lender's logs disagree on their hyperparameters")
    fps = {s[2] for s in seen}
    lender_fp = fps.pop() if len(fps) == 1 and None not in fps else fingerprint({"benchmark": benchmark, "hyperparameters": hp})
    return benchmark, lender, str(lender_fp), hp


def lender_from_config(path: Path) -> tuple[str, str, str, dict[str, Any]]:
    """(benchmark, lender, fingerprint, hyperparameters) from a lender's submitter config."""
    raw = _load_yaml(path)
    validate(raw, "submitter_config", what=f"lender config {path}")
    spec = load_benchmark(raw["benchmark"])
    hp = {**spec.reference_hyperparameters, **raw["hyperparameters"]}
    return raw["benchmark"], str(raw["submitter"]), fingerprint({"benchmark": spec.name, "hyperparameters": hp}), hp


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise HarnessError(f"{path} does not exist", ErrorCategory.NOT_FOUND) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise HarnessError(f"{path} cannot be read as YAML: {err}") from None


def check_borrowable(spec: BenchmarkSpec, hp: dict[str, Any], *, lender: str) -> None:
    """Refuse a lender whose values differ from the reference where closed rules forbid it."""
    ref = spec.reference_hyperparameters
    illegal = sorted(k for k, v in hp.items() if k not in spec.tunable_hyperparameters and k in ref and ref[k] != v)
    if illegal:
        raise HarnessError(
            f"cannot borrow from {lender}: its {', '.join(illegal)} differ from the reference, and only "
            f"{', '.join(sorted(spec.tunable_hyperparameters))} may be tuned in the closed division"
        )


def borrow(*, source: Path, to: Path, submitter: str | None = None, batch_size: int | None = None) -> dict[str, Any]:
    """Write the lender's hyperparameters into the borrower's config ``to``; return the config."""
    source = Path(source)
    benchmark, lender, lender_fp, hp = (
        lender_from_logs(source) if source.is_dir() else lender_from_config(source)
    )
    spec = load_benchmark(benchmark)
    check_borrowable(spec, hp, lender=lender)
    existing = _load_yaml(to) if Path(to).exists() else None
    if existing is not None:
        validate(existing, "submitter_config", what=f"borrower config {to}")
        if existing["benchmark"] != benchmark:
            raise HarnessError(f"{to} is for {existing['benchmark']}, the lender's results are for {benchmark}")
        submitter = submitter or existing["submitter"]
    if not submitter:
        raise HarnessError(f"{to} does not exist yet: give --submitter for the new config")
    chosen = dict(hp)
    if batch_size is not None:
        chosen[BATCH_SIZE] = batch_size
    elif existing is not None and BATCH_SIZE in existing["hyperparameters"]:
        chosen[BATCH_SIZE] = existing["hyperparameters"][BATCH_SIZE]
    config = {
        "submitter": submitter,
        "benchmark": benchmark,
        "division": "closed",
        "hyperparameters": chosen,
        "borrowed_from": {"lender": lender, "source": str(source), "lender_fingerprint": lender_fp, "hyperparameters": hp},
        # the borrower's own choice of precision per system stays: MLPerf borrows hyperparameters only
        **({"precision": existing["precision"]} if existing is not None and "precision" in existing else {}),
    }
    validate(config, "submitter_config", what=f"borrower config {to}")
    write_atomic(Path(to), yaml.safe_dump(config, sort_keys=False))
    return config


def check_borrowed_config(config: dict[str, Any], what: str) -> None:
    """A config claiming a borrow may differ from the lender's values in the batch size only."""
    borrowed = config.get("borrowed_from")
    if not borrowed:
        return
    lent, mine = borrowed["hyperparameters"], config["hyperparameters"]
    changed = sorted(k for k in set(lent) | set(mine) if k != BATCH_SIZE and lent.get(k) != mine.get(k, lent.get(k)))
    if changed:
        raise HarnessError(
            f"{what} claims to borrow from {borrowed['lender']} but changes {', '.join(changed)}; "
            "a borrowed group may differ only in global_batch_size"
        )
