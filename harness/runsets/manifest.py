"""A run set's manifest (``runset.json`` in its staging folder) and resuming from it: the settings
every run of the set must share (a ``--resume`` that changes one is refused, naming it), and the
seed of each finished run. Which set a command runs or resumes, and its runs still to do:
:mod:`harness.runsets.location`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.files import write_atomic
from harness.rules.precision import Precision
from harness.rules.seeds import Seed
from harness.runsets.plan import RunSetPlan

RESUME = "run the same command with --resume"  # what to do once an I/O fault's cause is gone


def write_resumable(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically; a fault is one line that says to resume (:func:`write_atomic`)."""
    write_atomic(path, text, then=RESUME)


def read_manifest(plan: RunSetPlan) -> dict[str, Any] | None:
    """The set's manifest as written; None when the set has none yet."""
    try:
        return json.loads(plan.manifest_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise HarnessError(f"{plan.manifest_path}: unreadable run-set manifest ({err})") from None


def begin_manifest(plan: RunSetPlan) -> dict[str, Any]:
    """The manifest this command keeps: the set's own when resuming (its settings as they began),
    else a new one; either way with the set's planned run count."""
    manifest = read_manifest(plan) if plan.request.resume else None
    manifest = manifest or {"fingerprint": plan.fingerprint, "benchmark": plan.spec.name, "runs": {}}
    manifest.setdefault("settings", set_settings(plan))
    manifest["planned_runs"] = plan.runs
    return manifest


def record_run(plan: RunSetPlan, manifest: dict[str, Any], index: int, seed: Seed) -> None:
    """Note run ``index`` as finished with ``seed``, and write the manifest."""
    manifest["runs"][str(index)] = {"seed": seed.value, "seed_source": seed.source.value}
    write_resumable(plan.manifest_path, json.dumps(manifest, indent=1, sort_keys=True))


def check_resumable(plan: RunSetPlan, *, existing: bool) -> None:
    """Refuse to resume the set at ``plan``'s results root (``existing``: its folder holds results)
    unless its manifest is there and agrees: the same settings (named when one differs), then the
    same fingerprint. Which set a command resumes: :mod:`harness.runsets.location`."""
    manifest = read_manifest(plan)
    if manifest is None:
        if existing:
            raise HarnessError(f"{plan.results_dir} has results but no run-set manifest to resume from")
        return
    check_resume_settings(manifest.get("settings"), set_settings(plan))  # first: it names the setting
    if manifest.get("fingerprint") != plan.fingerprint:
        raise HarnessError(
            "--resume: the benchmark, hyperparameters, profile, plan or data changed since the set began "
            f"(fingerprint {manifest.get('fingerprint')} -> {plan.fingerprint}); start a new set instead"
        )


def set_settings(plan: RunSetPlan) -> dict[str, Any]:
    """What every run of a set must share beyond the fingerprint (the benchmark, hyperparameters,
    profile, plan, codecs, tiers and data): the settings its logs and system description state or
    its runs are made with. Kept in the manifest; a resume that changes one is refused. What
    only measures a run (``--no-step-phases``, ``--trace``) is not among them: a set may be
    resumed with or without it."""
    r = plan.request
    return {
        "division": r.division,
        "status": r.status,
        "submitter": r.submitter,
        "seeds": list(r.seeds) if r.seeds else "drawn",
        "communication codecs": plan.comm.to_names(),
        "embedding tier": {"tier": r.embedding_tier.value, "cache_fraction": r.cache_fraction,
                           "cache_policy": r.cache_policy.value,
                           "ssd_tables": list(r.ssd_tables) if r.ssd_tables is not None else None},
        "threads": r.threads,
        "overlap": r.overlap,
        "emulate": r.emulate,
        "precision": plan.precision.value,
    }


# What a set begun before a setting was kept in its manifest ran with.
_SETTINGS_BEFORE_THEY_WERE_KEPT = {"precision": Precision.FP32.value}


def _show_setting(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "default" if value is None else str(value)


def check_resume_settings(began: dict[str, Any] | None, now: dict[str, Any]) -> None:
    """Refuse, in one line naming the setting, a resume whose settings differ from the set's."""
    if began is None:  # a set begun before the settings were kept: the fingerprint alone decides
        return
    began = {**_SETTINGS_BEFORE_THEY_WERE_KEPT, **began}
    for name, value in now.items():
        if name in began and began[name] != value:
            raise HarnessError(
                f"--resume: the set began with {name} {_show_setting(began[name])}, this command has "
                f"{_show_setting(value)}; resume with the set's settings or start a new set (nothing was changed)"
            )
