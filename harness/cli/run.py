"""``harness run``: a scored MLPerf-style run set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import click
from tqdm import tqdm

from harness.hw_profiles import DEFAULT_PROFILE
from harness.hw_profiles.profiles import format_bytes
from harness.hw_profiles.tiers import TIERS, Tier

# torch-free, as comm_codecs is not
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import CachePolicy
from harness.reference.planner.types import CommPrecision as Codec
from harness.rules.precision import Precision
from harness.rules.seeds import Seed, SeedSource
from harness.runsets.execute import execute_run_set
from harness.runsets.follow import follow_run_set
from harness.runsets.launch import Nodes
from harness.runsets.plan import RunSetPlan, plan_run_set
from harness.runsets.reporter import Reporter, run_name
from harness.runsets.request import (
    DEFAULT_STATUS,
    DEFAULT_SUBMITTER,
    EmbeddingTierChoice,
    RunSetRequest,
)
from harness.runsets.score import RunOutcome
from harness.runsets.verdict import (
    ComplianceVerdict,
    SetVerdict,
    compliance_verdict,
    run_set_fails,
    short_by_request,
)

DEFAULT_BENCHMARK = "dlrm_synthetic"
CODECS = [c.value for c in Codec]


class TerminalReporter(Reporter):
    """What a run set shows while it works, then a line per finished run.

    On a terminal (stdout and stderr both): a progress bar per run over the samples of its epoch
    limit, with training samples/s and the last AUC against the target; a run ends at the first
    evaluation that reaches the target, and its bar ends there at 100%, "reached the target at
    0.25 epoch". Elsewhere (a file, a pipe): plain lines, no carriage returns: one as a run starts
    and one per evaluation (docs/run.md, "Progress")."""

    def __init__(self, target_auc: float, max_epochs: float = 1.0, *, plain: bool | None = None,
                 bar_file: TextIO | None = None) -> None:
        self._target = target_auc
        self._max_epochs = max_epochs
        self._plain = not (_is_terminal(sys.stdout) and _is_terminal(sys.stderr)) if plain is None else plain
        self._bar_file = bar_file  # where the bar is drawn (None: tqdm's stderr)
        self._bar: tqdm | None = None
        self._postfix: dict[str, str] = {}
        self._run = 0  # the run shown (its index)
        self._evals = 0  # its evaluations so far

    def run_started(self, index: int, total: int, seed: Seed, train_samples: int) -> None:
        chosen = " (chosen)" if seed.source is SeedSource.USER else ""
        what = f"run {index + 1} of {total} (result_{index}.txt), seed {seed.value}{chosen}"
        self._run, self._evals, self._postfix = index, 0, {}
        if self._plain:
            click.echo(f"{what}: training to AUC {self._target}, at most {self._max_epochs:g} epoch of "
                       f"{train_samples:,} samples")
            return
        # one rate, labelled: the trainer's training samples/s (tqdm's own would count eval time too)
        self._bar = tqdm(
            total=max(1, round(train_samples * self._max_epochs)), desc=what, file=self._bar_file,
            unit="sample", unit_scale=True, leave=False, dynamic_ncols=True, mininterval=0.5,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} samples [{elapsed}<{remaining}]{postfix}",
        )

    def progress(self, index: int, event: dict[str, Any]) -> None:
        if "samples_per_s" in event:
            self._postfix["training"] = f"{event['samples_per_s']:,.0f} samples/s"
        if "cache_hit_rate" in event:
            self._postfix["cache hit"] = f"{event['cache_hit_rate']:.3f}"
        if "auc" in event:
            self._evals += 1
            reached = event["auc"] >= self._target
            self._postfix["AUC"] = f"{event['auc']:.4f} (target {self._target})"
            if self._plain:
                self._eval_line(event, reached)
        if self._bar is None:
            return
        self._bar.update(max(0, int(event.get("samples", 0)) - self._bar.n))
        if "auc" in event and event["auc"] >= self._target:  # the run ends here: so does its bar
            self._bar.total = max(self._bar.n, 1)
            self._bar.set_postfix_str(f"reached the target at {_epoch(event)} epoch", refresh=True)
            return
        self._bar.set_postfix(self._postfix, refresh=False)

    def _eval_line(self, event: dict[str, Any], reached: bool) -> None:
        """One plain line per evaluation."""
        at = f"at {_epoch(event)} epoch ({int(event.get('samples', 0)):,} samples)"
        verdict = ">= target {}: reached, the run ends here" if reached else "< target {}"
        rest = "".join(f"; {k} {v}" for k, v in self._postfix.items() if k != "AUC")
        click.echo(f"  {run_name(self._run)}, evaluation {self._evals} {at}: AUC {event['auc']:.5f} "
                   f"{verdict.format(self._target)}{rest}")

    def run_finished(self, outcome: RunOutcome) -> None:
        self.close()
        if outcome.converged:
            at = f" at {outcome.reached_at_epoch:.3g} epoch" if outcome.reached_at_epoch is not None else ""
            verdict = f"reached the target{at}"
        else:
            verdict = "did NOT reach the target"
        auc = f", final AUC {outcome.final_auc:.5f}" if outcome.final_auc is not None else ""
        click.echo(f"{run_name(outcome.index)}: {outcome.minutes * 60:8.2f} s  {verdict}{auc}  ({outcome.log_path})")

    def message(self, text: str) -> None:
        click.echo(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False


def _epoch(event: dict[str, Any]) -> str:
    """The evaluation's fraction of the epoch, as a run's log has it (``epoch_num``): ``0.25``."""
    return f"{float(event['epoch_num']):.3g}" if "epoch_num" in event else "?"


@click.command()
@click.option("--benchmark", "-b", default=DEFAULT_BENCHMARK, show_default=True, help="Benchmark spec name.")
@click.option("--profile", "-p", default=DEFAULT_PROFILE, show_default=True, help="Hardware profile name.")
@click.option("--submitter", "-s", default=DEFAULT_SUBMITTER, show_default=True, help="Submitting organisation.")
@click.option("--runs", "-n", type=click.IntRange(min=1), default=None, help="Runs in the set [default: the spec's].")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True,
              help="Root of the results tree; where it holds a complete set of this system and benchmark, a new set "
                   "goes to the next free root beside it (DIR-2, DIR-3, ...).")
@click.option("--seed", "seeds", type=click.IntRange(min=0), multiple=True,
              help="Choose seeds (repeat per run, or once for seed, seed+1, ...); recorded as user-chosen.")
@click.option("--resume", is_flag=True,
              help="Complete an interrupted run set (a complete one: show its score and check again).")
@click.option("--division", type=click.Choice(["closed", "open"]), default="closed", show_default=True)
@click.option("--status", type=click.Choice(["Available on-premise", "Available cloud",
              "Research, Development, or Internal (RDI)", "Preview"]), default=DEFAULT_STATUS, show_default=True,
              help="The system's availability, as MLPerf's system description states it.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch threads per run [default: all cores].")
@click.option("--emulate", is_flag=True,
              help="Run the profile's ranks as gloo processes on this CPU, its capacities scaled down; "
                   "the results are labelled emulated.")
@click.option("--comm-forward", type=click.Choice(CODECS), default="fp32", show_default=True,
              help="Codec of the forward embedding all-to-all (pooled embeddings).")
@click.option("--comm-backward", type=click.Choice(CODECS), default="fp32", show_default=True,
              help="Codec of the backward embedding all-to-all (their gradients).")
@click.option("--comm-allreduce", type=click.Choice(CODECS), default="fp32", show_default=True,
              help="Codec of the dense (and data-parallel table) gradient all-reduce.")
@click.option("--embedding-tier", type=click.Choice([t.value for t in EmbeddingTierChoice]), default="memory",
              show_default=True,
              help="Where the embedding rows live: in memory; in a file on local disk (the SSD tier) behind a "
                   "row cache; or auto: the planner places each table within the profile's capacities.")
@click.option("--cache-fraction", type=click.FloatRange(min=0, max=1, min_open=True), default=0.05,
              show_default=True, help="With --embedding-tier ssd or auto: the cache's share of the SSD tables' rows.")
@click.option("--cache-policy", type=click.Choice([p.value for p in CachePolicy]), default="lru", show_default=True,
              help="With --embedding-tier ssd or auto: which row the cache evicts.")
@click.option("--ssd-tables", default=None, metavar="I,J,...",
              help="Set these tables (indices) to the SSD tier. With --embedding-tier ssd the others stay in "
                   "memory [default: all on SSD]; with auto the planner places the others.")
@click.option("--data", "data", type=click.Path(path_type=Path), default=None, metavar="PATH",
              help="Train on the dataset at PATH (Criteo TSV days or train.txt, or MLPerf's npy layout; the "
                   "benchmark says which); it is validated before the first run. Default: the benchmark's generator.")
@click.option("--data-cache", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              envvar="HARNESS_DATA_CACHE", show_envvar=True,
              help="Where a dataset that needs a cache keeps it (Yambda's events as memory-mapped columns, built "
                   "once per dataset) [default: ~/.cache/harness/yambda].")
@click.option("--ssd-io", type=click.Choice(["direct", "buffered"]), default="direct", show_default=True,
              help="With --embedding-tier ssd or auto: move the SSD tier's rows with O_DIRECT where the file system "
                   "takes it (the drive's speed), or through the page cache (the same values, not the drive's "
                   "speed).")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="In a sharded run, overlap the all-to-alls and the dense all-reduce with computation (the "
                   "arithmetic is the same either way).")
@click.option("--step-phases/--no-step-phases", default=True, show_default=True,
              help="Measure where each training step's time goes (data wait, embeddings and dense forward and "
                   "backward, collectives waited for, optimizer), per rank, into the log's harness_step_phases "
                   "(harness report draws it); --no-step-phases leaves the steps unmeasured.")
@click.option("--trace", is_flag=True, default=False,
              help="Profile 3 training steps after the warm-up on every rank (PyTorch profiler) and write them "
                   "as one timeline, a process per rank (Chrome trace JSON: Perfetto, chrome://tracing), in the "
                   "run's staging folder, named by the log's harness_trace and by harness report.")
@click.option("--precision", type=click.Choice([p.value for p in Precision]), default=None,
              help="The dense layers' compute type, the tables' storage type and the pooled embeddings' type on "
                   "the wire (fp16 scales the loss) [default: the submitter config's choice for the profile, else "
                   "the fastest precision the hardware computes natively].")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Launchers of the run set, one per node of the profile: every node runs this same command "
                   "with its own --node-rank.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="This node's rank among the --nnodes launchers (node 0 hosts the rendezvous and writes the "
                   "results).")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
              help="With --nnodes > 1: node 0's address and a free port, where the launchers meet (c10d).")
@click.option("--rdzv-id", default="harness", show_default=True,
              help="With --nnodes > 1: a name for this run set's rendezvous, the same on every node.")
@click.option("--local-addr", default=None, metavar="ADDR",
              help="With --nnodes > 1: this node's address as the other nodes reach it [default: its host name].")
def run(benchmark: str, profile: str, submitter: str, runs: int | None, results_dir: Path, seeds: tuple[int, ...],
        resume: bool, division: str, status: str, threads: int | None, emulate: bool, comm_forward: str,
        comm_backward: str, comm_allreduce: str, embedding_tier: str, cache_fraction: float,
        cache_policy: str, ssd_tables: str | None, data: Path | None, data_cache: Path | None, ssd_io: str,
        overlap: bool, step_phases: bool,
        trace: bool, precision: str | None,
        nnodes: int, node_rank: int,
        rdzv_endpoint: str | None, rdzv_id: str, local_addr: str | None) -> None:
    """Train the reference DLRM N times to the target AUC; write MLPerf logs; print the score."""
    nodes = Nodes(nnodes, node_rank, rdzv_endpoint, rdzv_id, local_addr)
    if data is not None:
        click.echo(f"validating the data at {data} (read once, every TSV line or parquet batch checked, before the first "
                   "run) ...")
    plan = plan_run_set(RunSetRequest(
        benchmark=benchmark, profile=profile, submitter=submitter, runs=runs, results_dir=results_dir,
        seeds=seeds, resume=resume, division=division, status=status, threads=threads, emulate=emulate,
        # the options' names become the run set's enums here, at the edge
        comm=CommConfig(forward=Codec(comm_forward), backward=Codec(comm_backward), allreduce=Codec(comm_allreduce)),
        embedding_tier=EmbeddingTierChoice(embedding_tier), cache_fraction=cache_fraction,
        cache_policy=CachePolicy(cache_policy), ssd_tables=_indices(ssd_tables), data=data, nodes=nodes,
        data_cache=data_cache, direct_io=ssd_io == "direct",
        overlap=overlap, step_phases=step_phases, trace=trace, precision=Precision(precision) if precision is not None else None,
    ), progress=lambda message: click.echo(f"  {message}"))
    click.echo(
        f"{plan.spec.name} on {plan.system}: {plan.runs} run(s) to AUC {plan.spec.target_auc} "
        f"(at most {plan.spec.max_epochs:g} epoch of {plan.spec.dataset['train_samples']:,} samples), "
        f"submitter {submitter}, {division} division"
    )
    click.echo(precision_line(plan))
    if plan.data is not None:
        _describe_dataset(plan)
    if plan.sharding_plan is not None:
        _describe_sharding(plan)
    if plan.tier_plan is not None or (plan.sharding_plan is not None
                                      and plan.request.embedding_tier is not EmbeddingTierChoice.MEMORY):
        _describe_tiers(plan)
    reporter = TerminalReporter(plan.spec.target_auc, plan.spec.max_epochs)
    if nodes.multi and nodes.rank != 0:
        try:
            followed = follow_run_set(plan, reporter)
        finally:
            reporter.close()
        click.echo(f"node {nodes.rank} of {nodes.count}: took part in {len(followed.runs)} run(s); node 0 writes "
                   "their logs, the results tree and the score")
        return
    try:
        outcome = execute_run_set(plan, reporter)
    finally:
        reporter.close()
    assert outcome.results_dir is not None  # a set scored from its results tree (score_results)
    click.echo(f"system description: {outcome.system_json}")
    click.echo(f"result logs:        {outcome.results_dir}")
    compliance = _compliance(outcome.results_dir, short_by_request=short_by_request(plan))
    fails = run_set_fails(outcome, compliance)
    hint = (f"report:      harness report {outcome.results_dir} -o report   (then open report/index.html)\n"
            f"leaderboard: harness leaderboard {outcome.results_root} -o site   (then open site/index.html)")
    if outcome.score is None:
        click.echo(f"score: none ({outcome.score_error})")
        click.echo(hint)
        if fails:
            raise click.exceptions.Exit(1)
        return
    s = outcome.score
    click.echo(
        f"score: {s.minutes:.6f} minutes (olympic mean of {len(s.counted_minutes)} of {len(outcome.runs)} runs; "
        f"{s.non_converged_runs} did not converge)"
    )
    st = outcome.stats
    if st is not None and st.coefficient_of_variation is not None and st.bootstrap_95 is not None:
        click.echo(
            f"spread: mean {st.mean_minutes:.6f} min, sd {st.stdev_minutes:.6f} min, "
            f"CV {st.coefficient_of_variation:.1%}; bootstrap 95% interval of the score "
            f"[{st.bootstrap_95[0]:.6f}, {st.bootstrap_95[1]:.6f}] min"
        )
    click.echo(hint)
    if fails:
        raise click.exceptions.Exit(1)  # the set's verdict, as `harness check` gives it


def precision_line(plan: RunSetPlan) -> str:
    """``precision bf16 (native AVX512-BF16 on this CPU)``: the set's precision and where it comes from."""
    p, reason = plan.precision, plan.precision_reason
    scaled = "; the loss is scaled" if p.loss_scaling and "loss scaling" not in reason else ""
    return f"precision {p.value} ({reason}){scaled}"


def _indices(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"table indices separated by commas, not {text!r}", param_hint="--ssd-tables") from None


def _describe_dataset(plan: RunSetPlan) -> None:
    d = plan.data_description or {}
    shape = ", ".join(f"{k} {v}" for k, v in d.items() if k not in ("format", "path", "train_samples", "eval_samples"))
    click.echo(f"data: {d.get('format')} ({shape}) at {d.get('path')}: {d.get('train_samples', 0):,} training and "
               f"{d.get('eval_samples', 0):,} eval samples, validated")


def _describe_sharding(plan: RunSetPlan) -> None:
    sp = plan.sharding_plan
    assert sp is not None  # described only when there is one
    types = {st.value: n for st, n in sp.sharding_type_counts().items()}
    nodes = plan.request.nodes
    how = "emulated: gloo processes on " + ("this CPU" if not nodes.multi else
                                            f"{nodes.count} hosts, node {nodes.rank} here") + (
        f", capacities x{plan.emulation_scale:.3g}" if plan.emulation_scale is not None else "")
    if plan.profile.nodes > 1:
        how = f"{plan.profile.nodes} nodes x {plan.profile.accelerators_per_node}; {how}"
    click.echo(
        f"{plan.world_size} ranks ({how}); sharding plan {_short(sp.fingerprint)}: "
        + ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
        + f"; imbalance {sp.imbalance:.3f}; communication "
        + ", ".join(f"{k} {v}" for k, v in plan.comm.to_names().items())
    )


def _describe_tiers(plan: RunSetPlan) -> None:
    tp = plan.tier_plan or plan.sharding_plan
    assert tp is not None  # described only when there is one
    s = tp.tier_summary()
    where = [f"{s.whole[t]} in {t.value.upper()}" for t in (Tier.HBM, Tier.DDR) if t in s.whole]
    on_ssd = s.whole.get(Tier.SSD, 0)
    if on_ssd or s.split:
        where.append(f"{on_ssd} on the SSD tier" + (f", {s.split} split across tiers" if s.split else "")
                     + f" (SSD shards behind an {plan.request.cache_policy.value.upper()} cache of "
                     f"{plan.request.cache_fraction:g} of their rows)")
    room = ", ".join(f"{t.value.upper()} {format_bytes(s.used.get(t))} of {format_bytes(s.capacity.get(t))}"
                     for t in TIERS if s.capacity.get(t))
    over = f" over {s.ranks} ranks" if s.ranks > 1 else ""
    click.echo(f"tier plan {_short(tp.fingerprint)}: {s.tables} tables: {', '.join(where)}; used{over}: {room}")


def _short(fingerprint: str) -> str:
    return fingerprint.split(":", 1)[-1][:12]


def _compliance(results_dir: Path, *, short_by_request: bool) -> ComplianceVerdict:
    """Print what ``harness check`` says about the set just written, and return that verdict
    (:func:`harness.runsets.verdict.compliance_verdict` judges it)."""
    v = compliance_verdict(results_dir, short_by_request=short_by_request)
    if v.verdict is SetVerdict.NOT_CHECKED:
        click.echo(f"compliance: not checked ({v.why_not_checked})")
        return v
    word = _VERDICT_WORDS[v.verdict]
    first = f": {v.first_error}" if v.first_error is not None else (f" ({v.accepted})" if v.accepted else "")
    click.echo(f"compliance ({v.ruleset}): {v.passing_logs}/{v.logs} logs pass; run set {word}"
               f"{first}   (details: harness check {results_dir})")
    return v


_VERDICT_WORDS = {
    SetVerdict.PASS: "pass",
    SetVerdict.INCOMPLETE: "incomplete (fewer runs than the benchmark requires, as asked)",
    SetVerdict.FAIL: "FAIL",
}
