"""A run set's manifest: the settings a ``--resume`` must keep, compared as the manifest keeps them
(names, not enums; a set begun before precision was a setting resumes only in fp32)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.runs import FIXTURE


def test_a_set_begun_before_precision_was_kept_resumes_only_in_fp32():
    from harness.errors import HarnessError
    from harness.runsets.manifest import check_resume_settings as _check_resume_settings

    began = {"division": "closed", "threads": None}  # a manifest written before precision was a setting
    _check_resume_settings(began, {"division": "closed", "threads": None, "precision": "fp32"})
    with pytest.raises(HarnessError, match=r"^--resume: the set began with precision fp32, this command has bf16;"):
        _check_resume_settings(began, {"division": "closed", "threads": None, "precision": "bf16"})


def test_a_manifest_written_with_names_resumes_a_set_planned_with_enums(tmp_path):
    """The request's closed choices are enums; the manifest keeps their names (as every set began
    before they were enums did), so a set's settings read back compare equal, and a changed one is
    still named. A name where an enum belongs is refused in one line."""
    from harness.errors import HarnessError
    from harness.reference.planner.codecs import CommConfig
    from harness.reference.planner.types import CachePolicy, CommPrecision
    from harness.rules.precision import Precision
    from harness.runsets.manifest import check_resume_settings as _check_resume_settings
    from harness.runsets.manifest import set_settings
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import EmbeddingTierChoice, RunSetRequest

    written = {  # a manifest's settings, as JSON kept them before the request held enums
        "communication codecs": {"allreduce": "fp32", "backward": "fp32", "forward": "fp32"}, "division": "closed",
        "embedding tier": {"cache_fraction": 0.05, "cache_policy": "lfu", "ssd_tables": [0, 3], "tier": "ssd"},
        "emulate": False, "overlap": True, "precision": "fp16", "seeds": "drawn",
        "status": "Research, Development, or Internal (RDI)", "submitter": "reference", "threads": None}
    request = RunSetRequest(benchmark=str(FIXTURE), profile="local", results_dir=tmp_path / "r",
                            embedding_tier=EmbeddingTierChoice.SSD, ssd_tables=(0, 3), cache_policy=CachePolicy.LFU,
                            precision=Precision.FP16)
    now = set_settings(plan_run_set(request))
    assert now == written and json.loads(json.dumps(now)) == now
    _check_resume_settings(json.loads(json.dumps(written)), now)
    lru = set_settings(plan_run_set(dataclasses.replace(request, cache_policy=CachePolicy.LRU)))
    with pytest.raises(HarnessError, match=r"^--resume: the set began with embedding tier .*cache_policy lfu.*, "
                                           r"this command has .*cache_policy lru"):
        _check_resume_settings(written, lru)
    codecs = CommConfig(forward=CommPrecision.FP16, backward=CommPrecision.INT8, allreduce=CommPrecision.BF16)
    sharded = set_settings(plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="zionex-8gpu", emulate=True,
                                                      results_dir=tmp_path / "r", comm=codecs)))
    assert sharded["communication codecs"] == {"forward": "fp16", "backward": "int8", "allreduce": "bf16"}
    assert sharded["embedding tier"]["tier"] == "memory" and sharded["embedding tier"]["cache_policy"] == "lru"
    for slip in ({"embedding_tier": "ssd"}, {"cache_policy": "lfu"}, {"precision": "bf16"},
                 {"comm": (("forward", "fp16"),)}):
        with pytest.raises(HarnessError, match=f"^RunSetRequest.{next(iter(slip))} must be a ") as info:
            plan_run_set(dataclasses.replace(request, **slip))
        assert "\n" not in str(info.value)
    assert not (tmp_path / "r").exists()
