"""Submitter configs (data): ``harness/submitters/<org>/<benchmark>.yaml``.

A submitter without a config for a benchmark runs the benchmark's reference
hyperparameters. In the closed division a config may change only what the benchmark
lists as tunable (for ``dlrm_dcnv2``: global batch size and base learning rate).

A config may also choose the run's precision per system (``precision``: profile name -> fp32,
bf16 or fp16, ``"*"`` for every other profile); where it does not, the run takes the fastest
precision the hardware computes natively (:func:`harness.hw_profiles.native_precision`).
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from compliance.schemas import validate
from harness.errors import ErrorCategory, HarnessError
from harness.rules.hyperparameters import check_hyperparameters
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec
from harness.submitters.borrowing import check_borrowed_config


def submitters_root() -> Traversable:
    """The folder of submitter configs shipped with the harness."""
    return resources.files(__package__)


def load_submitter_config(submitter: str, benchmark: str) -> dict[str, Any] | None:
    """The config of ``submitter`` for ``benchmark``, or None when there is none."""
    path = submitters_root().joinpath(submitter, f"{benchmark}.yaml")
    if not path.is_file():
        return None
    what = f"submitter config {submitter}/{benchmark}.yaml"
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise HarnessError(f"{what} is not valid YAML: {err}") from None
    validate(raw, "submitter_config", what=what)
    for profile, name in raw.get("precision", {}).items():
        parse_precision(name, what=f"{what}: precision for {profile!r}")
    if raw["benchmark"] != benchmark or raw["submitter"] != submitter:
        raise HarnessError(f"{what} names submitter {raw['submitter']!r} and benchmark {raw['benchmark']!r}")

    check_borrowed_config(raw, what)
    return raw


def borrowing_provenance(submitter: str, benchmark: str) -> dict[str, str] | None:
    """``{"lender", "lender_fingerprint"}`` when the submitter's config borrows, for the logs."""
    config = load_submitter_config(submitter, benchmark)
    if not config or not config.get("borrowed_from"):
        return None
    b = config["borrowed_from"]
    return {"lender": b["lender"], "lender_fingerprint": b["lender_fingerprint"]}


def submitter_precision(submitter: str, benchmark: str, profile: str) -> tuple[Precision, str] | None:
    """The precision ``submitter``'s config for ``benchmark`` chooses for ``profile`` (its own
    entry, else ``"*"``) and a phrase saying where it comes from; None when it chooses none."""
    chosen = (load_submitter_config(submitter, benchmark) or {}).get("precision", {})
    key = profile if profile in chosen else "*" if "*" in chosen else None
    if key is None:
        return None
    where = f"{submitter}'s choice for {profile}" if key == profile else f"{submitter}'s choice for every system"
    return parse_precision(chosen[key]), f"{where} in {submitter}/{benchmark}.yaml"


def effective_hyperparameters(spec: BenchmarkSpec, submitter: str, division: str) -> dict[str, Any]:
    """The reference hyperparameters with the submitter's allowed changes applied."""
    hp = spec.reference_hyperparameters
    config = load_submitter_config(submitter, spec.name)
    if config is None:
        return hp
    changes = config["hyperparameters"]
    if division == "closed":
        illegal = sorted(k for k, v in changes.items() if k not in spec.tunable_hyperparameters and hp.get(k) != v)
        if illegal:
            raise HarnessError(
                f"closed division: {submitter}/{spec.name}.yaml changes {', '.join(illegal)}, but only "
                f"{', '.join(sorted(spec.tunable_hyperparameters))} may differ from the reference",
                ErrorCategory.BAD_INPUT,
            )
    merged = {**hp, **changes}
    check_hyperparameters(merged, what=f"submitter config {submitter}/{spec.name}.yaml")
    return merged
