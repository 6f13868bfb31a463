"""The terminal summary of a report: per run set, its runs, step percentiles, bytes, memory and
what the logs lack, in a few lines each."""

from __future__ import annotations

from harness.hw_profiles.profiles import format_bytes
from harness.report.collect import NOT_A_LOG_MARK, TIERS, Report, RunSetReport, name_files


def summary_lines(report: Report) -> list[str]:
    lines = [f"{len(report.run_sets)} run set(s) under {report.root}"]
    if report.not_logs:
        lines.append(f"not logs (no {NOT_A_LOG_MARK} line), left out: {name_files(report.not_logs, report.root)}")
    for rs in report.run_sets:
        lines += _run_set_lines(rs)
    return lines


def _run_set_lines(rs: RunSetReport) -> list[str]:
    target = f"target AUC {rs.target_auc:.6g}" if rs.target_auc is not None else "no target AUC"
    converged = sum(r.converged(rs.target_auc) for r in rs.runs)
    lines = [f"{rs.system} / {rs.benchmark}: {len(rs.runs)} runs, {converged} reached the target ({target}); {rs.path}"]
    lines += [f"  unreadable: {p}" for p in rs.problems]
    if rs.not_logs:
        lines.append(f"  not logs (no {NOT_A_LOG_MARK} line), left out: {name_files(rs.not_logs, rs.path)}")
    for r in rs.runs:
        auc = f"final AUC {r.evals[-1].auc:.5f}" if r.evals else "no evaluations"
        seconds = f"{r.run_seconds:.2f} s" if r.run_seconds is not None else "no run_stop"
        rate = f", {r.samples_per_s:,.0f} samples/s" if r.samples_per_s else ""
        lines.append(f"  {r.name}: {seconds}, {auc}{rate}")
    run = rs.first_with("step_phases")
    if run is not None and run.step_phases is not None:
        for k in run.step_phases.ranks:
            lines.append(f"  step, rank {k.rank}: P50 {k.step_s.p50 * 1000:.3f} ms, P90 {k.step_s.p90 * 1000:.3f} ms, "
                         f"P99 {k.step_s.p99 * 1000:.3f} ms ({run.name})")
    run = rs.first_with("collectives")
    if run is not None:
        measured = sum(sum(c.measured.values()) for c in run.collectives)
        projected = [sum((c.projected or {}).values()) for c in run.collectives if c.projected is not None]
        beside = f" (planner's projection {format_bytes(sum(projected))})" if projected else ""
        lines.append(f"  collectives: {format_bytes(measured)} per step, all ranks' sent{beside}")
    run = rs.first_with("memory")
    if run is not None:
        peaks = [f"{t.upper()} {format_bytes(max(m.peak.get(t, 0) for m in run.memory))}" for t in TIERS
                 if any(m.peak.get(t) for m in run.memory)]
        lines.append(f"  memory peak per rank (largest): {', '.join(peaks) or 'none logged'}")
    run = rs.first_with("cache")
    if run is not None and run.cache is not None and run.cache.hit_rate is not None:
        lines.append(f"  cache over {run.cache.tier.upper()}: hit rate {run.cache.hit_rate:.1%}")
    lines += [f"  profiler trace: {r.setup['profiler trace']}" for r in rs.runs if "profiler trace" in r.setup]
    lacks = dict.fromkeys(item for r in rs.runs for item in r.missing)
    lines += [f"  lacks: {item}" for item in lacks]
    return lines
