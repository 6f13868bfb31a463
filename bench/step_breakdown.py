"""Where ours' training step goes, op by op, beside the roofline's terms (issue #49: "where the other half goes").

    python bench/step_breakdown.py --precision bf16                 # the small config of bench/throughput.py
    python bench/step_breakdown.py --config dcnv2 --precision bf16  # MLPerf dlrm_dcnv2's architecture (rows capped)

The engine's step (:meth:`~harness.reference.engine.session.TrainingSession.step`, "ours" of
``bench/throughput.py``, on the same configs, batches and session builder) runs ``--warmup``
steps, then ``--steps`` steps timed plainly, then the same steps under ``torch.profiler`` (CPU
activities, ``record_shapes``, ``profile_memory``), each inside a ``record_function`` range. Every outermost
``aten::`` op of a step (an op not inside another op) is charged to one category:

* **GEMMs** (``mm``, ``addmm``, ``bmm``, ``matmul``, ``linear``, the interaction's included),
  forward or backward: backward where the op runs under an ``autograd::engine::evaluate_function``
  event (the autograd engine's node);
* **embedding gather**: ops inside the sparse arch's forward (a ``record_function`` range this
  script puts around ``model.sparse_arch``'s forward); **embedding update**: ops inside the
  backward nodes of those forward ops (linked by the autograd sequence number: for ours, the
  fused lookup's backward, which applies Adagrad to the rows);
* **interaction**: the interaction's other ops (its forward inside a range around
  ``model.interaction``, its backward nodes by sequence number), GEMMs excepted;
* **dense optimizer**: ops inside ``Optimizer.step`` / ``Optimizer.zero_grad`` ranges;
* **autocast casts** (``to``, ``_to_copy``, ``copy_``), **allocations** (top-level ``empty``,
  ``zeros``, ``*_like``: the allocator's time inside other ops is not separable),
  **dense elementwise and loss** (a fixed list of names), and the rest **unattributed** (its
  largest names printed).

The time of a step not inside any op (Python, NumPy, the autograd engine's bookkeeping) is
charged to the region it falls in: the embedding forward (where it is built, the compiled gather of
``harness/reference/models/_rowupdate.c`` is not a torch op: its time is counted here), the embedding
update (the compiled row update of a bf16 table likewise), the interaction (its compiled pass,
``harness/reference/models/_dotinteraction.c``, likewise), the dense optimizer, other backward nodes
(autograd), or elsewhere (the forward's and the step's Python).
The rows add up to the profiled step's mean; the profiler's own cost is the ratio printed of
that mean to the unprofiled steps' mean. The roofline column is ``bench/roofline.py``'s terms
for the same shapes, measured in the same run: forward and backward GEMMs apart, the gather
bytes and the update bytes at copy bandwidth. The two embedding rows are set against their bytes with
their time in no op added (their Python, NumPy and compiled passes, not torch ops): their ops
alone would flatter them. Where the dot interaction ran compiled, its multiplies are not torch GEMMs:
their share of the roofline's GEMMs is set against the interaction's whole time instead, and the
GEMM rows against the rest.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import throughput as tp  # bench/throughput.py: the script's own folder is on sys.path
import torch
from roofline import EmbeddingTraffic, copy_bandwidth, gemm_dtype, gemm_time, mlp_gemms, sync
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from harness.rules.precision import parse_precision

STEP = "breakdown: step"
EMB_FORWARD = "breakdown: embedding forward"
INTERACTION = "breakdown: interaction"
BACKWARD = "autograd::engine::evaluate_function: "

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}
COMPOSITE_OPS = {"aten::linear", "aten::matmul"}  # looked into: autocast casts their operands inside them
CAST_OPS = {"aten::to", "aten::_to_copy", "aten::copy_"}
ALLOC_OPS = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zeros_like",
             "aten::ones_like", "aten::new_zeros", "aten::new_empty", "aten::new_ones", "aten::zero_", "aten::fill_"}
ELEMENTWISE_OPS = {"aten::relu", "aten::threshold_backward", "aten::binary_cross_entropy_with_logits", "aten::sum",
                   "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sigmoid", "aten::div_", "aten::sub_",
                   "aten::mean", "aten::squeeze", "aten::unsqueeze", "aten::t", "aten::view", "aten::reshape",
                   "aten::detach", "aten::transpose", "aten::expand", "aten::flatten"}

GEMM_FWD, GEMM_BWD = "GEMMs, forward", "GEMMs, backward"
GATHER, UPDATE = "embedding gather (forward lookup)", "embedding update (fused backward + Adagrad)"
INTER, OPT = "interaction (non-GEMM, fwd + bwd)", "dense optimizer (Adagrad step, zero_grad)"
CASTS, ALLOC = "autocast casts (to, _to_copy, copy_)", "allocations (top-level empty/zeros/*_like)"
ELEM, UNATTR = "dense elementwise + loss (relu, bias sums, BCE)", "unattributed ops"
PY_GATHER, PY_UPDATE = "  not in ops: embedding forward (Python)", "  not in ops: embedding update (Python, C, NumPy)"
PY_OPT, PY_AUTOGRAD = "  not in ops: dense optimizer (Python)", "  not in ops: autograd engine (other nodes)"
PY_ELSE = "  not in ops: elsewhere (forward + step Python)"
PY_INTER = "  not in ops: interaction (compiled pass, Python)"
OP_ROWS = (GEMM_FWD, GEMM_BWD, GATHER, UPDATE, INTER, OPT, CASTS, ALLOC, ELEM, UNATTR)
OVERHEAD_ROWS = (PY_GATHER, PY_UPDATE, PY_INTER, PY_OPT, PY_AUTOGRAD, PY_ELSE)
OVERHEAD_OF = {"gather": PY_GATHER, "update": PY_UPDATE, "interaction": PY_INTER, "optimizer": PY_OPT,
               "backward": PY_AUTOGRAD}


@dataclass
class Breakdown:
    """Microseconds summed over the profiled steps, per row; the unattributed ops' names."""

    steps: int = 0
    step_us: list[float] = field(default_factory=list)
    us: collections.Counter = field(default_factory=collections.Counter)
    allocations: float | None = None  # per step, from the profiler's memory events (None: not measured)
    allocated_bytes: float = 0.0
    interaction_gemm_us: float = 0.0  # the interaction's multiplies run as torch ops (0 where it ran compiled)
    by_op: dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(collections.Counter))

    def ms(self, row: str) -> float:
        return self.us[row] / self.steps / 1e3


def children(evt: FunctionEvent) -> Iterator[FunctionEvent]:
    return iter(sorted(evt.cpu_children, key=lambda e: e.time_range.start))


def forward_regions(step: FunctionEvent) -> dict[int, str]:
    """Autograd sequence number -> "gather" or "interaction", for the forward ops (and custom
    Functions) of a step inside the ranges around the sparse arch and the interaction."""
    out: dict[int, str] = {}

    def walk(evt: FunctionEvent, region: str | None) -> None:
        if evt.name.startswith(BACKWARD):
            return
        region = {EMB_FORWARD: "gather", INTERACTION: "interaction"}.get(evt.name, region)
        if region is not None and evt.sequence_nr >= 0:
            out.setdefault(evt.sequence_nr, region)
        for c in children(evt):
            walk(c, region)

    walk(step, None)
    return out


def op_row(name: str, region: str | None, backward: bool) -> str | None:
    """The row of an outermost op; None where unattributed."""
    if region == "gather":
        return GATHER
    if region == "update":
        return UPDATE
    if region == "optimizer":
        return OPT
    if name in GEMM_OPS:
        return GEMM_BWD if backward else GEMM_FWD
    if name in CAST_OPS:
        return CASTS
    if region == "interaction":
        return INTER
    if name in ALLOC_OPS:
        return ALLOC
    if name in ELEMENTWISE_OPS:
        return ELEM
    return None


def attribute(step: FunctionEvent, out: Breakdown) -> None:
    """Charge one profiled step's time to the rows of ``out``."""
    seq_region = forward_regions(step)

    def walk(evt: FunctionEvent, region: str | None, backward: bool) -> None:
        us = evt.time_range.elapsed_us()
        if evt.name in COMPOSITE_OPS:  # its own time is a GEMM's, the ops inside (casts, the GEMM) theirs
            inside = 0.0
            for c in children(evt):
                inside += c.time_range.elapsed_us()
                walk(c, region, backward)
            row = op_row(evt.name, region, backward) or UNATTR
            out.us[row] += us - inside
            out.by_op[row][evt.name] += us - inside
            return
        if evt.name.startswith("aten::"):  # an outermost op: all its time is its row's
            row = op_row(evt.name, region, backward) or UNATTR
            out.us[row] += us
            out.by_op[row][evt.name] += us
            if region == "interaction" and evt.name in GEMM_OPS:
                out.interaction_gemm_us += us
            return
        if evt.name.startswith(BACKWARD):
            backward = True
            linked = seq_region.get(evt.sequence_nr)
            region = {"gather": "update", "interaction": "interaction"}.get(linked or "", "backward")
        elif evt.name.startswith("Optimizer."):
            region = "optimizer"
        elif evt.name == EMB_FORWARD:
            region = "gather"
        elif evt.name == INTERACTION:
            region = "interaction"
        inside = 0.0
        for c in children(evt):
            inside += c.time_range.elapsed_us()
            walk(c, region, backward)
        out.us[OVERHEAD_OF.get(region or "", PY_ELSE)] += us - inside

    walk(step, None, False)
    out.steps += 1
    out.step_us.append(step.time_range.elapsed_us())


def allocations(prof: profile) -> list[int] | None:
    """The bytes of every allocation the profiled steps made (the profiler's memory events: its
    results' private ``kineto_results``, as ``prof.events()`` keeps only those outside any op);
    None where this torch has them not."""
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        return None
    return [e.nbytes() for e in results.events() if e.name() == "[memory]" and e.nbytes() > 0]


def ranged(module: torch.nn.Module, name: str) -> None:
    """Run ``module``'s forward inside a ``record_function`` range ``name`` (this instance only)."""
    forward = module.forward

    def wrapped(*args, **kwargs):
        with record_function(name):
            return forward(*args, **kwargs)

    module.forward = wrapped  # type: ignore[method-assign]


@dataclass(frozen=True)
class RooflineTerms:
    """bench/roofline.py's terms for the config, in ms per step."""

    gemm_fwd_ms: float
    gemm_bwd_ms: float
    gather_ms: float
    update_ms: float
    interaction_gemm_ms: float = 0.0  # of the GEMMs above, the dot interaction's (forward and backward)

    @property
    def step_ms(self) -> float:
        return self.gemm_fwd_ms + self.gemm_bwd_ms + self.gather_ms + self.update_ms


def roofline_terms(cfg, batch_size: int, sparse_batches, precision, device) -> RooflineTerms:
    """The roofline's GEMMs (forward: the first of each group of three shapes of
    :func:`roofline.mlp_gemms`; backward: the other two) and its bytes at copy bandwidth."""
    gemms, dtype = mlp_gemms(cfg, batch_size), gemm_dtype(precision, device)
    fwd_s, _ = gemm_time(gemms[0::3], device, dtype)
    bwd_s, _ = gemm_time([g for i, g in enumerate(gemms) if i % 3], device, dtype)
    n = cfg.num_sparse + 1  # the dot interaction's: its three multiplies of one shape
    inter = [g for g in gemms if g == (batch_size * n, cfg.embedding_dim, n)]
    inter_s = gemm_time(inter, device, dtype)[0] if inter else 0.0
    bw, _ = copy_bandwidth(device)
    traffic = EmbeddingTraffic.of_batches(sparse_batches, cfg, precision)
    return RooflineTerms(fwd_s * 1e3, bwd_s * 1e3, traffic.gather_bytes / bw * 1e3, traffic.update_bytes / bw * 1e3,
                         inter_s * 1e3)


def print_table(bd: Breakdown, roof: RooflineTerms, plain_ms: float) -> None:
    step_ms = statistics.mean(bd.step_us) / 1e3
    # the embeddings' rows (and a compiled interaction's) are measured against their roofline with their time in
    # no op included (their Python, NumPy and compiled passes, which are not torch ops): the ops alone would flatter
    with_py = {GATHER: bd.ms(GATHER) + bd.ms(PY_GATHER), UPDATE: bd.ms(UPDATE) + bd.ms(PY_UPDATE),
               INTER: bd.ms(INTER) + bd.ms(PY_INTER)}
    roof_of = {GEMM_FWD: roof.gemm_fwd_ms, GEMM_BWD: roof.gemm_bwd_ms, GATHER: roof.gather_ms, UPDATE: roof.update_ms}
    # a dot interaction run compiled (harness/reference/models/dotkernel.py) makes its multiplies in its pass,
    # not in torch ops: its share of the roofline's GEMMs moves to its row, set against its whole time
    compiled_inter = roof.interaction_gemm_ms > 0 and bd.interaction_gemm_us == 0
    inter_roof = roof.interaction_gemm_ms if compiled_inter else 0.0
    if compiled_inter:
        roof_of[INTER] = inter_roof
        roof_of[GEMM_FWD] -= inter_roof / 3
        roof_of[GEMM_BWD] -= 2 * inter_roof / 3
    print(f"{'ours: where a step goes':<50} {'ms/step':>8} {'of step':>8} {'roofline ms':>12} {'measured/roof':>14}")

    def line(row: str, ms: float) -> None:
        roof_ms = roof_of.get(row)
        extra = "" if roof_ms is None else f" {roof_ms:12.2f} {with_py.get(row, ms) / roof_ms:13.2f}x"
        print(f"{row:<50} {ms:8.2f} {ms / step_ms:8.1%}{extra}")

    for row in OP_ROWS:
        line(row, bd.ms(row))
    ops = sum(bd.ms(r) for r in OP_ROWS)
    print(f"{'autograd + Python (not inside any op)':<50} {step_ms - ops:8.2f} {(step_ms - ops) / step_ms:8.1%}")
    for row in OVERHEAD_ROWS:
        line(row, bd.ms(row))
    gemm = bd.ms(GEMM_FWD) + bd.ms(GEMM_BWD)
    print(f"{'step (profiled mean; rows sum to it)':<50} {step_ms:8.2f} {1:8.1%} {roof.step_ms:12.2f} "
          f"{step_ms / roof.step_ms:13.2f}x")
    emb, roof_emb = with_py[GATHER] + with_py[UPDATE], roof.gather_ms + roof.update_ms
    roof_gemm = roof.gemm_fwd_ms + roof.gemm_bwd_ms - inter_roof
    print(f"GEMMs {gemm:.2f} ms = {gemm / roof_gemm:.2f}x the roofline's {roof_gemm:.2f}"
          f"{' (the dot interaction' + chr(39) + 's aside)' if compiled_inter else ''}; embeddings {emb:.2f} ms "
          f"(ops and their time in no op) = {emb / roof_emb:.2f}x its bytes' {roof_emb:.2f}")
    if compiled_inter:
        print(f"the dot interaction ran compiled: its multiplies in its pass, {with_py[INTER]:.2f} ms with its "
              f"ops = {with_py[INTER] / inter_roof:.2f}x its GEMMs' roofline {inter_roof:.2f}")
    for row, short in ((UPDATE, "embedding update"), (INTER, "interaction"), (ELEM, "elementwise"),
                       (UNATTR, "unattributed")):
        if bd.by_op[row]:
            top = ", ".join(f"{n.removeprefix('aten::')} {us / bd.steps / 1e3:.2f}" for n, us in
                            bd.by_op[row].most_common(4))
            print(f"largest ops of the {short} (ms/step): {top}")
    if bd.allocations is not None:
        print(f"allocator: {bd.allocations:,.0f} allocations, {bd.allocated_bytes / 1e6:,.1f} MB a step "
              "(its time lies inside the ops that allocate: not separable)")
    print(f"profiled {bd.steps} steps: mean {step_ms:.2f} ms; unprofiled, the same steps: {plain_ms:.2f} ms "
          f"(the profiler's cost: {step_ms / plain_ms:.2f}x)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["small", "dcnv2"], default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", help="ours' precision (default fp32)")
    ap.add_argument("--batch-size", type=int, default=None, help="as bench/throughput.py's")
    ap.add_argument("--max-rows", type=int, default=None, help="as bench/throughput.py's")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps profiled, and timed plainly (default 8 small, 3 dcnv2)")
    ap.add_argument("--warmup", type=int, default=3, help="steps before (default 3)")
    args = ap.parse_args(argv)
    device, precision = torch.device(args.device), parse_precision(args.precision)
    targs = tp.parse_args(["--config", args.config, "--precision", precision.value, "--device", args.device]
                          + ([] if args.batch_size is None else ["--batch-size", str(args.batch_size)])
                          + ([] if args.max_rows is None else ["--max-rows", str(args.max_rows)]))
    bc, _ = tp.bench_config(targs, device.type == "cuda")
    steps = args.steps or (8 if args.config == "small" else 3)
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    cfg = bc.model
    print(f"config {args.config} on {device}: batch {bc.batch_size}, {len(cfg.table_rows)} tables, "
          f"{sum(cfg.table_rows):,} rows x dim {cfg.embedding_dim}, pooling {sum(cfg.pooling)} ids/sample, "
          f"precision {precision.value}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    session, _ = tp.ours_session(bc, precision, device)
    ranged(session.model.sparse_arch, EMB_FORWARD)
    ranged(session.model.interaction, INTERACTION)
    batches = tp.make_batches(cfg, bc.batch_size, args.warmup + steps, device)
    for b in batches[: args.warmup]:
        session.step(b)
    timed = batches[args.warmup :]
    plain_ms = tp.time_steps(session.step, timed, device) * 1e3
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        for b in timed:
            with record_function(STEP):
                session.step(b)
            sync(device)
    bd = Breakdown()
    for evt in prof.events():
        if evt.name == STEP:
            attribute(evt, bd)
    allocs = allocations(prof)
    if allocs is not None:
        bd.allocations, bd.allocated_bytes = len(allocs) / bd.steps, sum(allocs) / bd.steps
    roof = roofline_terms(cfg, bc.batch_size, [b.sparse for b in timed], precision, device)
    print_table(bd, roof, plain_ms)


if __name__ == "__main__":
    main()
