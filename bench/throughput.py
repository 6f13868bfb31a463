"""Training throughput of the reference DLRM against plain PyTorch and TorchRec, and the machine's limit, in one run.

    python bench/throughput.py --precision bf16                 # the fixed small config on CPU
    python bench/throughput.py --config dcnv2 --precision bf16  # MLPerf dlrm_dcnv2's architecture (rows capped)
    python bench/throughput.py                                  # everything in fp32 (--precision fp32)
    python bench/throughput.py --device cuda --precision fp16   # on a GPU: fp16 with loss scaling
    python bench/throughput.py --precision bf16 --sparse-optimizer rowwise_adagrad  # ours and TorchRec, row-wise
    python bench/throughput.py --profile-step                   # first, where a step's time goes, phase by phase
    python bench/step_breakdown.py --precision bf16             # ours' step op by op (torch.profiler) vs the roofline

Three models are timed, and TorchRec as a fourth where it is installed, on the identical
architecture, batches and (in-memory) data; a step is forward + backward + optimizer. Every model
runs the same optimizer, so that the ratios compare implementations, not algorithms: Adagrad
(one fp32 accumulator per value) everywhere, or with ``--sparse-optimizer rowwise_adagrad`` the
tables' row-wise Adagrad (one accumulator per row: MLPerf dlrm_dcnv2's, FBGEMM's
``EXACT_ROWWISE_ADAGRAD``) for ours and TorchRec, and the plain models are not run (torch has no
row-wise Adagrad):

* **plain fp32**: what a PyTorch user writes first: one ``nn.EmbeddingBag(sparse=True)`` per
  table and one ``torch.optim.Adagrad`` over every parameter, all in fp32.
* **plain bf16**: the same model with its forward and loss under
  ``torch.autocast(device_type, dtype=torch.bfloat16)``, what an informed user writes (the
  tables stay fp32). On CUDA with ``--precision fp16`` it is fp16 autocast with
  ``torch.amp.GradScaler`` instead (the ratios line still calls it "plain bf16"). It steps the
  same module and optimizer as plain fp32: only the autocast differs.
* **ours**: the engine's own step (:meth:`harness.reference.engine.session.TrainingSession.step` on
  :class:`harness.reference.models.dlrm.DLRM`: the tables fused into one weight, Adagrad fused into the
  embedding backward) at ``--precision``, given to the engine as ``RunConfig.precision``: in bf16
  or fp16 its dense layers under autocast with fp32 master weights and its tables stored in that
  type (fp32 Adagrad state, stochastic rounding); fp16 scales the loss. Where the engine stores the
  tables in another type than asked, a note says so.
* **TorchRec best** (``bench/torchrec_baseline.py``, on a CPU, when ``import torchrec`` and
  ``import fbgemm_gpu`` succeed): TorchRec's own ``DLRM`` (``DLRM_DCN`` for ``--config dcnv2``;
  its own initial weights) in its fastest configuration measured on this CPU, whatever
  ``--precision``: ``DistributedModelParallel`` on a one-process gloo group, every table
  table-wise in FBGEMM's fused kernel (TBE) with fp32 tables and the bench's optimizer fused
  into the backward (``EXACT_ADAGRAD``, or ``EXACT_ROWWISE_ADAGRAD``: row-wise Adagrad is
  TorchRec's fastest, and runs against ours at row-wise Adagrad, not against the per-value
  Adagrad; docs/performance.md), the dense part and the loss under ``torch.autocast("cpu", bfloat16)``, the
  dense parameters stepped by ``torch.optim.Adagrad`` as the plain models' are. Where TorchRec
  is not installed one line says so and how to install it (docs/performance.md, "TorchRec in
  the same run"), and the rest of the output is as without it; where it cannot run the config
  or the device (``--device cuda``), one line says it is skipped and why. ``--profile-step``
  leaves it out.

Timings alternate between the models over several rounds (ours, plain fp32, plain bf16, then
TorchRec, round after round) and report each one's median, so all see the same machine noise.

**The roofline** (``bench/roofline.py``) is the limit of one step measured here in the same run, once
in every round beside the models (the machine's speed moves over seconds: a roofline measured once
moved every fraction with it); the median round's is printed, with each round's figure:
the time of the dense part's own GEMMs (every layer's forward and two backward multiplies and
the interaction's, at the benchmark's batch, in the precision's compute type: fp32, bf16, or fp16
on CUDA; each shape the median of 7 repetitions) plus the embedding bytes of a step at the
memory bandwidth measured by a large tensor copy (read + write bytes, median of 7)::

    embedding bytes = B * sum(pooling) * D * b_table  +  U * 2 * (D * b_table + S * 4)

the forward gather of every looked-up row, plus the backward read and write of each distinct
row's weights (``b_table``: 4 bytes in fp32, 2 in bf16/fp16) and its fp32 Adagrad state (``S``
values: ``D``, or 1 for row-wise Adagrad), with
``U`` the distinct ids of each table in the batch summed over tables (counted on the timed
batches, their mean). Roofline samples/s = B / (gemm time + bytes / bandwidth). Each model's
line gives its fraction of it. The last line is exactly::

    ratios: ours / plain fp32 X.XXx, ours / plain bf16 Y.YYx

and, where TorchRec ran, the same line with its ratio appended (so what parses the first two
still does)::

    ratios: ours / plain fp32 X.XXx, ours / plain bf16 Y.YYx, ours / TorchRec best Z.ZZx

With ``--sparse-optimizer rowwise_adagrad`` (no plain models) it is ``ratios: ours / TorchRec
best Z.ZZx``, or ``ratios: none`` without TorchRec.

``--rounds 1 --steps 2`` makes a short run (a quick check, not a measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch
from roofline import (  # bench/roofline.py: the script's own folder is on sys.path
    Roofline,
    sync,
)
from torch import nn

from harness.errors import HarnessError
from harness.hw_profiles.profiles import DeviceType, bare_cpu_profile
from harness.reference.data.batches import Batch
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import TrainingSession
from harness.reference.models.dlrm import DLRMConfig, Interaction
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import load_benchmark

# MLPerf dlrm_dcnv2's tables and ids per sample: the spec's (one source for each benchmark number)
_DCNV2 = load_benchmark("dlrm_dcnv2")
MLPERF_POOLING: tuple[int, ...] = tuple(_DCNV2.dataset["pooling"])
MLPERF_ROWS: tuple[int, ...] = tuple(_DCNV2.dataset["table_rows"])


@dataclass(frozen=True)
class BenchConfig:
    model: DLRMConfig
    batch_size: int
    lr: float = 0.01
    sparse_optimizer: str = "adagrad"  # the tables' (the spec's embedding_optimizer): or "rowwise_adagrad"

    @property
    def rowwise(self) -> bool:
        return self.sparse_optimizer == "rowwise_adagrad"


def small_config(batch_size: int) -> BenchConfig:
    """26 tables x 100,000 rows x dim 64, one lookup each; MLPs 13-512-256-64 and 512-256-1; dot."""
    return BenchConfig(
        DLRMConfig(table_rows=(100_000,) * 26, embedding_dim=64, pooling=(1,) * 26, bottom_mlp=(512, 256, 64),
                   top_mlp=(512, 256, 1), interaction=Interaction.DOT),
        batch_size,
    )


def dcnv2_config(batch_size: int, max_rows: int) -> BenchConfig:
    """MLPerf dlrm_dcnv2: dim 128, multi-hot, 512-256-128, DCN 3 x rank 512, 1024-1024-512-256-1."""
    return BenchConfig(
        DLRMConfig(table_rows=tuple(min(r, max_rows) for r in MLPERF_ROWS), embedding_dim=128, pooling=MLPERF_POOLING,
                   bottom_mlp=(512, 256, 128), top_mlp=(1024, 1024, 512, 256, 1), interaction=Interaction.DCN,
                   dcn_layers=3, dcn_rank=512),
        batch_size,
    )


class BaselineDLRM(nn.Module):
    """Plain PyTorch DLRM: a list of sparse EmbeddingBags, Sequential MLPs, the same interactions."""

    def __init__(self, cfg: DLRMConfig, device):
        super().__init__()
        self.cfg = cfg
        self.bags = nn.ModuleList(
            nn.EmbeddingBag(r, cfg.embedding_dim, mode="sum", sparse=True, device=device) for r in cfg.table_rows
        )

        def mlp(n_in, widths, relu_last):
            layers = []
            for i, w in enumerate(widths):
                layers.append(nn.Linear(n_in, w, device=device))
                if relu_last or i < len(widths) - 1:
                    layers.append(nn.ReLU())
                n_in = w
            return nn.Sequential(*layers)

        self.bottom = mlp(cfg.num_dense, cfg.bottom_mlp, True)
        self.top = mlp(cfg.interaction_width, cfg.top_mlp, False)
        n = cfg.num_sparse + 1
        self.li, self.lj = torch.tril_indices(n, n, -1, device=device)
        if cfg.interaction is Interaction.DCN:
            w = cfg.interaction_width
            self.v = nn.ModuleList(nn.Linear(w, cfg.dcn_rank, bias=False, device=device) for _ in range(cfg.dcn_layers))
            self.w = nn.ModuleList(nn.Linear(cfg.dcn_rank, w, device=device) for _ in range(cfg.dcn_layers))
        self.cols = torch.tensor((0, *cfg.pooling)).cumsum(0).tolist()

    def forward(self, dense, sparse):  # as a user writes it (the timed step); the pieces below serve --profile-step
        x = self.bottom(dense)
        e = [bag(sparse[:, self.cols[f] : self.cols[f + 1]]) for f, bag in enumerate(self.bags)]
        if self.cfg.interaction is Interaction.DOT:
            z = torch.stack([x, *e], dim=1)
            zz = torch.bmm(z, z.transpose(1, 2))[:, self.li, self.lj]
            features = torch.cat([x, zz], dim=1)
        else:
            x0 = torch.cat([x, *e], dim=1)
            features = x0
            for v, w in zip(self.v, self.w):
                features = x0 * w(v(features)) + features
        return self.top(features).squeeze(1)

    def lookups(self, sparse):
        """The pooled embeddings, ``B x F x D``."""
        return torch.stack([bag(sparse[:, self.cols[f] : self.cols[f + 1]]) for f, bag in enumerate(self.bags)], 1)

    def interact(self, x, e):
        if self.cfg.interaction is Interaction.DOT:
            z = torch.cat([x.unsqueeze(1), e], dim=1)
            zz = torch.bmm(z, z.transpose(1, 2))[:, self.li, self.lj]
            return torch.cat([x, zz], dim=1)
        x0 = torch.cat([x, e.flatten(1)], dim=1)
        features = x0
        for v, w in zip(self.v, self.w):
            features = x0 * w(v(features)) + features
        return features


class BaselineInteraction(nn.Module):
    def __init__(self, base: BaselineDLRM):
        super().__init__()
        self.base = base

    def forward(self, x, e):
        return self.base.interact(x, e)


def make_batches(cfg: DLRMConfig, batch_size: int, count: int, device) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        dense = torch.rand(batch_size, cfg.num_dense, generator=g)
        sparse = torch.cat(
            [torch.randint(0, r, (batch_size, p), generator=g) for r, p in zip(cfg.table_rows, cfg.pooling)], dim=1
        )
        labels = torch.randint(0, 2, (batch_size,), generator=g).float()
        out.append(Batch(dense.to(device), sparse.to(device), labels.to(device), cfg.pooling))
    return out


def bench_spec(bc: BenchConfig) -> tuple[dict, dict]:
    """A benchmark spec and hyperparameters for the config, so that ours trains through the
    engine (:class:`~harness.reference.engine.session.TrainingSession`) as a run does."""
    cfg = bc.model
    raw = {
        "name": "throughput_bench", "description": "bench/throughput.py", "ruleset": "6.0.0",
        "dataset": {"kind": "synthetic", "seed": 0, "train_samples": bc.batch_size * 1000, "eval_samples": 1,
                    "table_rows": list(cfg.table_rows), "pooling": list(cfg.pooling)},
        "model": {"embedding_dim": cfg.embedding_dim, "bottom_mlp": list(cfg.bottom_mlp),
                  "top_mlp": list(cfg.top_mlp), "interaction": cfg.interaction.value, "dcn_layers": cfg.dcn_layers,
                  "dcn_rank": cfg.dcn_rank, "embedding_optimizer": bc.sparse_optimizer},
        "quality": {"metric": "AUC", "target": 0.99}, "eval": {"every_epoch_fraction": 1.0, "batch_size": 1},
        "max_epochs": 1, "required_runs": 3, "max_non_converged_runs": 1, "tunable_hyperparameters": [],
        "reference_hyperparameters": {"global_batch_size": bc.batch_size, "opt_name": "adagrad",
                                      "opt_base_learning_rate": bc.lr, "opt_adagrad_epsilon": 1e-8,
                                      "gradient_accumulation_steps": 1},
    }
    return raw, raw["reference_hyperparameters"]


AUTOCAST_DTYPES = {Precision.FP32: None, Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}


@dataclass(frozen=True)
class Amp:
    """How a step autocasts: ``dtype`` None is plain fp32; ``scaled`` adds a ``GradScaler``."""

    device_type: str
    dtype: torch.dtype | None = None
    scaled: bool = False

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def plain_amp(precision: Precision, device: torch.device) -> Amp:
    """The informed user's autocast: bf16, or on CUDA at fp16 fp16 with a ``GradScaler``."""
    if precision is Precision.FP16 and device.type == "cuda":
        return Amp(device.type, torch.float16, scaled=True)
    return Amp(device.type, torch.bfloat16)


def ours_autocast(session: TrainingSession, honoured: bool) -> Callable[[], contextlib.AbstractContextManager]:
    """The autocast region the engine's step runs its forward in, to profile its pieces one by
    one as the step runs them: the session's own where it has one, else none where the engine
    does not honour the precision, else the precision's."""
    if callable(getattr(session, "autocast", None)):
        return session.autocast
    if not honoured:
        return contextlib.nullcontext
    dtype = AUTOCAST_DTYPES[parse_precision(session.config.precision)]
    return Amp(torch.device(session.device).type, dtype).autocast


@contextlib.contextmanager
def torch_defaults():
    """torch's default algorithms, whatever the engine set process-wide (on CUDA it asks for
    deterministic ones): the plain steps run as a user's would."""
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)


def stepper(model: nn.Module, optimizer: torch.optim.Optimizer, amp: Amp):
    """The plain step, as a user writes it: the forward and loss under ``amp``'s autocast, and
    with a ``GradScaler`` when ``amp.scaled``; torch's default algorithms (:func:`torch_defaults`)."""
    loss_fn = nn.BCEWithLogitsLoss()
    scaler = torch.amp.GradScaler(amp.device_type) if amp.scaled else None

    def step(batch: Batch) -> None:
        with torch_defaults():
            plain_step(batch)

    def plain_step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        with amp.autocast():
            loss = loss_fn(model(batch.dense, batch.sparse), batch.labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    return step


def with_torch_defaults(step: Callable[[Batch], object]) -> Callable[[Batch], None]:
    """``step`` under torch's default algorithms (:func:`torch_defaults`), as the plain steps run."""

    def wrapped(batch: Batch) -> None:
        with torch_defaults():
            step(batch)

    return wrapped


TORCHREC_INSTALL = ("pip install fbgemm-gpu-cpu==1.8.0 && pip install torchrec==1.8.0 --no-deps && "
                    "pip install tensordict 'torchmetrics==1.0.3' tqdm pyre-extensions iopath")


def load_torchrec() -> ModuleType | str:
    """``bench/torchrec_baseline.py`` where ``torchrec`` and ``fbgemm_gpu`` import, else the one
    line that says TorchRec is not installed and how to install it."""
    try:
        import fbgemm_gpu  # noqa: F401
        import torchrec  # noqa: F401
    except Exception as e:  # noqa: BLE001 - not installed, or built against another torch (its ops fail to load)
        why = f"{type(e).__name__}: {e}".splitlines()[0]
        state = "not installed" if isinstance(e, ImportError) else "installed but does not import"
        return (f"TorchRec: {state} ({why}), not timed; to time it too, into this environment: "
                f"{TORCHREC_INSTALL} (docs/performance.md, \"TorchRec in the same run\")")
    import torchrec_baseline  # bench/torchrec_baseline.py

    return torchrec_baseline


def time_steps(step, batches, device) -> float:
    """Seconds per step over ``batches``."""
    sync(device)
    t = time.perf_counter()
    for b in batches:
        step(b)
    sync(device)
    return (time.perf_counter() - t) / len(batches)


PHASES = ("lookups (forward)", "bottom MLP", "interaction", "top MLP + loss", "backward: dense part",
          "backward: embeddings (+ fused update)", "optimizer step", "Python and the rest")


def profile_phases(embeddings, dense_arch, interaction, over_arch, step_fn, optimizer,
                   autocast: Callable[[], contextlib.AbstractContextManager], batches: list[Batch],
                   device) -> dict[str, float]:
    """Milliseconds per step of each phase, each timed on its own (synchronised on a GPU) over
    ``batches``: the forward pieces (under ``autocast()``), the backward of the dense part
    (from the loss to the pooled embeddings) apart from the embeddings' own backward (the scatter
    of their gradients and, for ours, the fused Adagrad update), the dense optimizer's step; "the
    rest" is the whole step (``step_fn``, timed on its own, loss scaling included) minus the
    phases."""
    loss_fn = nn.BCEWithLogitsLoss()
    acc = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(name: str, cast: bool = False):
        sync(device)
        t = time.perf_counter()
        with autocast() if cast else contextlib.nullcontext():
            yield
        sync(device)
        acc[name] += time.perf_counter() - t

    for b in batches:
        optimizer.zero_grad(set_to_none=True)
        with phase(PHASES[0], True):
            e = embeddings(b.sparse)
        with phase(PHASES[1], True):
            d = dense_arch(b.dense)
        e_in = e.detach().requires_grad_()
        with phase(PHASES[2], True):
            z = interaction(d, e_in)
        with phase(PHASES[3], True):
            loss = loss_fn(over_arch(z).reshape(-1), b.labels)
        with phase(PHASES[4]):
            loss.backward()
        with phase(PHASES[5]):
            e.backward(e_in.grad)
        with phase(PHASES[6]):
            optimizer.step()
    whole = time_steps(step_fn, batches, device)
    out = {k: v / len(batches) * 1e3 for k, v in acc.items()}
    out[PHASES[-1]] = whole * 1e3 - sum(v for k, v in out.items() if k != PHASES[-1])
    return out


def print_profile(columns: dict[str, dict[str, float]]) -> None:
    """One row per phase, one column per model (ms per step)."""
    print(f"{'phase (ms per step)':<40}" + "".join(f" {name:>11}" for name in columns))
    for phase in PHASES:
        print(f"{phase:<40}" + "".join(f" {col[phase]:11.2f}" for col in columns.values()))
    print(f"{'step':<40}" + "".join(f" {sum(col.values()):11.2f}" for col in columns.values()))


def table_dtype(session: TrainingSession) -> torch.dtype | None:
    """The type the engine stores its tables in (None where its embeddings have no one weight)."""
    weight = getattr(session.model.sparse_arch.embeddings, "weight", None)
    return None if weight is None or weight.numel() == 0 else weight.dtype


def time_models(steps: dict[str, Callable[[Batch], object]], batches: list[Batch], rounds: int,
                device, roofline: Callable[[], Roofline] | None = None) -> tuple[dict[str, float], list[Roofline]]:
    """Median seconds per step of each of ``steps``, timed in turn round after round (after two
    warm-up steps each), so that all see the same machine noise; and ``roofline`` measured in each
    round beside them (the machine's speed moves over seconds, and a roofline measured once moved
    the fractions with it: docs/performance.md)."""
    for step in steps.values():
        for b in batches[:2]:
            step(b)
    times: dict[str, list[float]] = {name: [] for name in steps}
    roofs: list[Roofline] = []
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(time_steps(step, batches, device))
        if roofline is not None:
            roofs.append(roofline())
    return {name: statistics.median(t) for name, t in times.items()}, roofs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["small", "dcnv2"], default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", choices=[p.value for p in Precision], default="fp32",
                    help="ours' precision (the engine's RunConfig.precision) and the roofline's (default fp32)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: 2048 (small), 1024 (dcnv2 on CPU)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per round (default 10 small, 3 dcnv2 on CPU)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of timing, each model in turn (default 5)")
    ap.add_argument("--sparse-optimizer", choices=["adagrad", "rowwise_adagrad"], default="adagrad",
                    help="the tables' optimizer, ours' and TorchRec's alike (default adagrad, every model's; "
                         "rowwise_adagrad: MLPerf dlrm_dcnv2's, without the plain models)")
    ap.add_argument("--profile-step", action="store_true", help="print where a step's time goes, phase by phase")
    ap.add_argument("--max-rows", type=int, default=None,
                    help="cap on table rows for dcnv2 (default 200k on CPU, 4M on GPU: ours and the plain model, "
                         "each with fp32 Adagrad state, must fit)")
    return ap.parse_args(argv)


def bench_config(args: argparse.Namespace, on_gpu: bool) -> tuple[BenchConfig, int]:
    """The config the options name, and the timed steps per round."""
    if args.config == "small":
        return dataclasses.replace(small_config(args.batch_size or 2048),
                                   sparse_optimizer=args.sparse_optimizer), args.steps or 10
    bc = dcnv2_config(args.batch_size or (65536 if on_gpu else 1024),
                      args.max_rows or (4_000_000 if on_gpu else 200_000))
    return dataclasses.replace(bc, sparse_optimizer=args.sparse_optimizer), args.steps or (20 if on_gpu else 3)


def ours_session(bc: BenchConfig, precision: Precision, device: torch.device) -> tuple[TrainingSession, bool]:
    """The engine's session at ``precision``, and whether it stored its tables in that precision
    (a note says so where it did not)."""
    session = TrainingSession(RunConfig.offline(
        *bench_spec(bc), 0, who="bench",
        profile=dataclasses.replace(bare_cpu_profile("bench"), device_type=DeviceType(device.type)),
        precision=precision.value))
    stored = table_dtype(session)
    honoured = stored is None or stored.itemsize == precision.bytes_per_element
    if not honoured:
        print(f"note: the engine stored its tables in {stored} ({stored.itemsize} bytes per value), not in "
              f"{precision.value} ({precision.bytes_per_element}): ours ran at the engine's precision, "
              "not the one asked")
    return session, honoured


def print_results(labels: dict[str, str], sps: dict[str, float], roof: Roofline) -> None:
    """The roofline with its parts, one line per model (TorchRec's where it ran), and last the
    ratios line (TorchRec's ratio appended where it ran)."""
    for line in roof.describe():
        print(line)
    names = [name for name in ("plain fp32", "plain bf16", "ours", "TorchRec") if name in sps]
    width = max(len(labels[name]) for name in names)
    for name in names:
        print(f"{labels[name] + ':':<{width + 1}} {sps[name]:12,.0f} samples/s  "
              f"({sps[name] / roof.samples_per_s:5.1%} of roofline)")
    ratios = [f"ours / {name} {sps['ours'] / sps[name]:.2f}x" for name in ("plain fp32", "plain bf16") if name in sps]
    if "TorchRec" in sps:
        ratios.append(f"ours / TorchRec best {sps['ours'] / sps['TorchRec']:.2f}x")
    print(f"ratios: {', '.join(ratios) or 'none'}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    precision = parse_precision(args.precision)
    bc, steps = bench_config(args, device.type == "cuda")
    cfg = bc.model
    plain = plain_amp(precision, device)
    warnings.filterwarnings("ignore", message="Sparse invariant checks")  # torch's, once per sparse Adagrad
    print(f"config {args.config} on {device}: batch {bc.batch_size}, {len(cfg.table_rows)} tables, "
          f"{sum(cfg.table_rows):,} rows x dim {cfg.embedding_dim}, pooling {sum(cfg.pooling)} ids/sample, "
          f"precision {precision.value}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    session, honoured = ours_session(bc, precision, device)
    torch.manual_seed(0)
    base = BaselineDLRM(cfg, device)
    base_opt = torch.optim.Adagrad(base.parameters(), lr=bc.lr, eps=1e-8)
    labels = {
        "ours": f"ours {precision.value} (fused tables + fused {'row-wise ' if bc.rowwise else ''}Adagrad)",
        "plain fp32": "plain fp32 (EmbeddingBag sparse + torch.optim.Adagrad)",
        "plain bf16": f"plain {plain.name} (the same under torch.autocast {plain.name}"
                      + (" + GradScaler)" if plain.scaled else ")"),
    }
    step_fns = {
        "ours": session.step,  # the engine's own step: schedule, forward, fused backward, optimizers
        "plain fp32": stepper(base, base_opt, Amp(device.type)),
        "plain bf16": stepper(base, base_opt, plain),  # the same module and optimizer, under autocast
    }
    if bc.rowwise:
        print("plain fp32 and plain bf16: not run with --sparse-optimizer rowwise_adagrad (torch.optim has no "
              "row-wise Adagrad)")
        del step_fns["plain fp32"], step_fns["plain bf16"]

    batches = make_batches(cfg, bc.batch_size, steps, device)
    torchrec = load_torchrec()
    if isinstance(torchrec, str):
        print(torchrec)
    elif why := torchrec.unsupported(cfg, device):
        print(f"TorchRec: skipped for config {args.config} on {device}: {why}")
    else:
        labels["TorchRec"] = torchrec.label(bc.rowwise)
        step_fns["TorchRec"] = with_torch_defaults(torchrec.build(cfg, bc.lr, batches, bc.rowwise)[1])
    seconds, roofs = time_models(step_fns, batches, args.rounds, device, lambda: Roofline.measure(
        cfg, bc.batch_size, [b.sparse for b in batches], precision, device, bc.rowwise))
    sps = {name: bc.batch_size / s for name, s in seconds.items()}

    if args.profile_step:
        m, base_int = session.model, BaselineInteraction(base)
        phases = {"ours": profile_phases(m.sparse_arch, m.dense_arch, m.interaction, m.over_arch, step_fns["ours"],
                                         session.dense_optimizer, ours_autocast(session, honoured), batches, device)}
        if "plain fp32" in step_fns:
            phases["plain fp32"] = profile_phases(base.lookups, base.bottom, base_int, base.top,
                                                  step_fns["plain fp32"], base_opt, contextlib.nullcontext, batches,
                                                  device)
            phases[f"plain {plain.name}"] = profile_phases(base.lookups, base.bottom, base_int, base.top,
                                                           step_fns["plain bf16"], base_opt, plain.autocast, batches,
                                                           device)
        print_profile(phases)

    by_speed = sorted(roofs, key=lambda r: r.samples_per_s)
    print(f"roofline measured in each of the {len(roofs)} rounds, beside the models: "
          + ", ".join(f"{r.samples_per_s:,.0f}" for r in roofs) + " samples/s; the median round's:")
    print_results(labels, sps, by_speed[len(by_speed) // 2])


if __name__ == "__main__":
    try:
        main()
    except HarnessError as e:  # a bad setting the engine refused: one line, as the harness says it
        print(f"throughput: {e}")
        raise SystemExit(e.exit_code) from None
