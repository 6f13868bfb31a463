"""Text of projections: one projection phase by phase (``harness project``), a tree's run sets
projected beside measured (``harness project --against``), the whole step beside the plan's
embeddings-only one (``harness plan``), an inference benchmark's Server QPS bound (``harness plan``)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.hw_profiles.profiles import format_bytes
from harness.projection.against import Comparison
from harness.projection.constants import Constants
from harness.projection.inference import InferenceBound, Resource
from harness.projection.step import StepProjection
from harness.projection.train_time import Projection


def duration(seconds: float) -> str:
    """A time as a person reads it: ``0.0757 s``, ``42.1 s``, ``9.36 minutes``, ``3.79 hours``."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.3g} minutes"
    return f"{seconds / 3600:.3g} hours"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f}"


def _rate(samples_per_s: float) -> str:
    if samples_per_s >= 1e6:
        return f"{samples_per_s / 1e6:,.2f}M samples/s"
    return f"{samples_per_s:,.0f} samples/s"


def step_lines(step: StepProjection, title: str) -> list[str]:
    """The phases of a step, each alone and what it adds once overlap is counted, and the step."""
    lines = [f"{title:<48} {'alone (ms)':>10} {'in the step':>11}"]
    lines += [f"  {p.name:<46} {_ms(p.seconds)} {_ms(p.exposed):>11}" for p in step.phases]
    lines.append(f"  {'step':<46} {'':>10} {_ms(step.seconds):>11}  ({_rate(step.samples_per_s)})")
    return lines


def render_projection(p: Projection, constants: Constants) -> str:
    """``harness project``'s text."""
    low, high = p.band_minutes
    eff = constants.of(p.system.device_class)
    per_rank = p.batch_size / p.system.ranks
    evaluation = p.eval_step
    lines = [
        f"{p.benchmark} on {p.system.describe()}",
        f"batch {p.batch_size:,} ({per_rank:,.0f} a rank), {p.precision}; device {p.system.device.name}: "
        f"{p.system.peak_flops(p.precision) / 1e12:,.1f} TFLOP/s {p.precision} and "
        f"{p.system.memory_bw_bytes_per_s / 1e9:,.0f} GB/s a rank",
        *step_lines(p.step, "training step, slowest rank"),
        f"  embeddings only (harness plan: lookups and all-to-alls at peak bandwidths) "
        f"{p.plan.step_time_s * 1e3:.3f} ms, imbalance {p.plan.imbalance:.4f}",
        *step_lines(evaluation, f"evaluation step (batch {evaluation.batch_size:,})"),
        f"to the target: {p.convergence.mean:.4g} {p.convergence.unit} ({p.convergence.how}): "
        f"{p.samples_to_target:,.0f} samples, {p.samples_to_target / p.batch_size:,.0f} steps",
        f"  training     {p.train_seconds:12.2f} s",
        f"  evaluations  {p.eval_seconds:12.2f} s  ({p.evaluations:.1f} x {p.eval_seconds_each:.3f} s)",
        f"projected score: {p.minutes:.4g} minutes (band {low:.4g} to {high:.4g}: 9 in 10 real results of "
        f"{p.system.device_class.value} systems fell within {p.band:g}x of their projection)",
        f"constants ({p.system.device_class.value}, harness/projection/constants.yaml): "
        f"GEMMs {eff.gemm_efficiency:.3g}, streams {eff.memory_efficiency:.3g}, gathers {eff.gather_efficiency:.3g} "
        f"and links {eff.link_efficiency:.3g} of peak; {eff.seconds_per_op * 1e6:.3g} us an operation",
    ]
    return "\n".join(lines)


def render_comparisons(comparisons: Sequence[Comparison]) -> str:
    """One line per run set: measured and projected minutes and their ratio, or why not projected."""
    width = max((len(c.label) for c in comparisons), default=10)
    lines = [f"{'RUN SET':<{width}}  {'MEASURED':>10}  {'PROJECTED':>10}  {'RATIO':>6}"]
    for c in comparisons:
        measured = f"{c.measured_minutes:10.3f}" if c.measured_minutes is not None else f"{'-':>10}"
        if c.projection is None:
            lines.append(f"{c.label:<{width}}  {measured}  not projected: {c.reason}")
        else:
            lines.append(f"{c.label:<{width}}  {measured}  {c.projection.minutes:10.3f}  {c.ratio:6.2f}")
    return "\n".join(lines)


def whole_step_line(step: StepProjection) -> str:
    """``harness plan``'s line for the whole step beside the embeddings-only one."""
    return (f"projected whole step (harness project: dense GEMMs, activations, embeddings, all-to-alls, "
            f"all-reduce, operations at {step.precision}): {step.seconds * 1e3:.3f} ms, {_rate(step.samples_per_s)}")


def inference_bound_lines(b: InferenceBound, device: str) -> list[str]:
    """``harness plan``'s lines for an inference benchmark: the bound, what binds, each resource's rate
    and what it is priced from, the Server batch beside the latency bound, and what is not counted."""
    r, s, binding = b.request, b.shape, b.binding
    compute = b.of(Resource.COMPUTE)
    memories = [m for m in (b.of(Resource.HBM), b.of(Resource.DDR), b.of(Resource.SSD)) if m is not None]
    links = b.of(Resource.LINKS)
    rows = ", ".join(f"{name} {n:,.0f}" for name, n, _ in b.rows_per_request)
    sizes = sorted({size for _, _, size in b.rows_per_request})
    moved = ", ".join(f"{tier.value.upper()} {format_bytes(round(n))}" for tier, n in b.bytes_per_request)
    cache = ("" if b.cached_hit_share is None else
             f"; caches serve {b.cached_hit_share:.1%} of the reads behind them (the share of their shards' rows "
             f"they hold: lookups taken as uniform, as the generator draws dlrm-v3's items; hits and misses timed "
             f"apart, where the planner's step time blends their tiers' bandwidths)")
    return [
        f"inference bound (a projection at peak rates: an upper bound, not a measurement): "
        f"{b.requests_per_s:,.0f} requests/s over {b.ranks} x {device}, {binding.resource.label}",
        f"  compute: {b.flops_per_request / 1e9:,.1f} GFLOP a request ({s.layers} STU layers over {r.tokens:,.0f} "
        f"tokens: {r.contextual} contextual, {r.history:,.0f} history, {r.candidates:,} candidates; target-aware "
        f"causal attention) at {b.peak_flops_per_rank / 1e12:,.0f} TFLOP/s {b.precision} a rank: "
        f"{compute.requests_per_s if compute else 0:,.0f} requests/s",
        f"  memory: rows a request {rows} ({' or '.join(f'{n:,} B' for n in sizes)} each), moving {moved} over all "
        f"ranks; " + ", ".join(f"{m.resource.value.upper()} {m.requests_per_s:,.0f} requests/s (rank {m.rank})"
                               for m in memories) + cache,
        *([f"  links: {links.requests_per_s:,.0f} requests/s (the plan's all-to-alls of ids and vectors, rank "
           f"{links.rank})"] if links else []),
        f"  Server: a batch of {b.batch} requests takes at least {b.batch_seconds * 1e3:.1f} ms of one rank at peak; "
        f"the latency bound is {b.latency_bound_s * 1e3:g} ms",
        "  not counted: the layers outside the STU stack, elementwise work, the host-to-accelerator link and SSD "
        "IOPS (not in the profiles); the efficiencies of constants.yaml (fitted on training results) are not applied",
    ]
