"""Training throughput of the reference DLRM against a plain PyTorch baseline, in one run.

    python bench/throughput.py                       # the fixed small config on CPU
    python bench/throughput.py --config dcnv2        # MLPerf dlrm_dcnv2's architecture (rows capped)
    python bench/throughput.py --device cuda         # the same on a GPU
    python bench/throughput.py --profile-step        # first, where a step's time goes, phase by phase

Both models get the identical architecture, batch and (in-memory) data; a step is
forward + backward + optimizer. The baseline is what a PyTorch user writes first: one
``nn.EmbeddingBag(sparse=True)`` per table and one ``torch.optim.Adagrad`` over every
parameter. Ours is the engine's own step (:meth:`harness.reference.session.TrainingSession.step`
on :class:`harness.reference.model.DLRM`): the tables fused into one weight and Adagrad fused
into the embedding backward (see ``harness/reference/embeddings.py``).

Timings alternate between the two models over several rounds and report the median, so
both see the same machine noise; the last line is the ratio ours / baseline. Beside them it
prints the bound the machine's matrix-multiply rate puts on the dense part: the time of its
own GEMMs (every layer's forward and two backward multiplies, and the interaction's, at the
benchmark's batch; each shape the median of 7 repetitions), so the fraction of the bound is
stable from run to run (:func:`gemm_bound`).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from harness.reference.batches import Batch
from harness.reference.model import DLRMConfig, Interaction
from harness.reference.run_config import RunConfig
from harness.reference.session import TrainingSession

MLPERF_POOLING = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
MLPERF_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
               11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)


@dataclass(frozen=True)
class BenchConfig:
    model: DLRMConfig
    batch_size: int
    lr: float = 0.01


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


def mlp_flops_per_sample(cfg: DLRMConfig) -> float:
    """Forward + backward FLOPs of the dense layers and interaction (2 per MAC, backward = 2 x forward)."""
    macs, n_in = 0, cfg.num_dense
    for w in cfg.bottom_mlp:
        macs, n_in = macs + n_in * w, w
    if cfg.interaction is Interaction.DOT:
        n = cfg.num_sparse + 1
        macs += n * n * cfg.embedding_dim
    else:
        macs += cfg.dcn_layers * 2 * cfg.interaction_width * cfg.dcn_rank
    n_in = cfg.interaction_width
    for w in cfg.top_mlp:
        macs, n_in = macs + n_in * w, w
    return 3 * 2 * macs


def mlp_gemms(cfg: DLRMConfig, batch: int) -> list[tuple[int, int, int]]:
    """The matrix multiplies of one training step of the dense part, ``(m, k, n)`` each: every
    layer's forward ``(B x in) @ (in x out)`` and its two backward ones (input and weight
    gradients), for the bottom MLP, the DCN layers' low-rank pair (or the dot interaction's
    batched ``(F+1) x D`` products, as one ``B(F+1) x D x (F+1)`` multiply) and the top MLP."""
    layers, n_in = [], cfg.num_dense
    for w in cfg.bottom_mlp:
        layers.append((n_in, w))
        n_in = w
    out = []
    if cfg.interaction is Interaction.DCN:
        for _ in range(cfg.dcn_layers):
            layers += [(cfg.interaction_width, cfg.dcn_rank), (cfg.dcn_rank, cfg.interaction_width)]
    else:
        n = cfg.num_sparse + 1
        out += [(batch * n, cfg.embedding_dim, n)] * 3  # forward, and the two gradients (the same shape)
    n_in = cfg.interaction_width
    for w in cfg.top_mlp:
        layers.append((n_in, w))
        n_in = w
    for k, n in layers:
        out += [(batch, k, n), (batch, n, k), (n, batch, k)]  # forward, input gradient, weight gradient
    return out


def gemm_bound(cfg: DLRMConfig, batch: int, device, reps: int = 7) -> tuple[float, float]:
    """The samples/s the machine's matrix-multiply rate allows the dense part, and that rate:
    every multiply of a step (:func:`mlp_gemms`), each timed as the median of ``reps``
    repetitions after a warm-up, summed. The bound uses the layers' own shapes at the
    benchmark's batch, so it is what these GEMMs can do here, not a square matrix's peak."""
    g = torch.Generator(device="cpu").manual_seed(0)
    total_s, flops = 0.0, 0.0
    for m, k, n in mlp_gemms(cfg, batch):
        a = torch.randn(m, k, generator=g).to(device)
        b = torch.randn(k, n, generator=g).to(device)
        for _ in range(2):
            a @ b
        times = []
        for _ in range(reps):
            _sync(device)
            t = time.perf_counter()
            a @ b
            _sync(device)
            times.append(time.perf_counter() - t)
        total_s += statistics.median(times)
        flops += 2 * m * k * n
    return batch / total_s, flops / total_s


def gemm_flops_per_s(device, size: int = 2048, reps: int = 20) -> float:
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    for _ in range(3):
        a @ b
    _sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * size**3 * reps / (time.perf_counter() - t)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


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
    engine (:class:`~harness.reference.session.TrainingSession`) as a run does."""
    cfg = bc.model
    raw = {
        "name": "throughput_bench", "description": "bench/throughput.py", "ruleset": "6.0.0",
        "dataset": {"kind": "synthetic", "seed": 0, "train_samples": bc.batch_size * 1000, "eval_samples": 1,
                    "table_rows": list(cfg.table_rows), "pooling": list(cfg.pooling)},
        "model": {"embedding_dim": cfg.embedding_dim, "bottom_mlp": list(cfg.bottom_mlp),
                  "top_mlp": list(cfg.top_mlp), "interaction": cfg.interaction.value, "dcn_layers": cfg.dcn_layers,
                  "dcn_rank": cfg.dcn_rank, "embedding_optimizer": "adagrad"},
        "quality": {"metric": "AUC", "target": 0.99}, "eval": {"every_epoch_fraction": 1.0, "batch_size": 1},
        "max_epochs": 1, "required_runs": 3, "max_non_converged_runs": 1, "tunable_hyperparameters": [],
        "reference_hyperparameters": {"global_batch_size": bc.batch_size, "opt_name": "adagrad",
                                      "opt_base_learning_rate": bc.lr, "opt_adagrad_epsilon": 1e-8,
                                      "gradient_accumulation_steps": 1},
    }
    return raw, raw["reference_hyperparameters"]


def stepper(model: nn.Module, optimizer: torch.optim.Optimizer):
    loss_fn = nn.BCEWithLogitsLoss()

    def step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(batch.dense, batch.sparse), batch.labels).backward()
        optimizer.step()

    return step


def time_steps(step, batches, device) -> float:
    """Seconds per step over ``batches``."""
    _sync(device)
    t = time.perf_counter()
    for b in batches:
        step(b)
    _sync(device)
    return (time.perf_counter() - t) / len(batches)


PHASES = ("lookups (forward)", "bottom MLP", "interaction", "top MLP + loss", "backward: dense part",
          "backward: embeddings (+ fused update)", "optimizer step", "Python and the rest")


def profile_phases(model: nn.Module, embeddings, dense_arch, interaction, over_arch, step_fn, optimizer,
                   batches: list[Batch], device) -> dict[str, float]:
    """Milliseconds per step of each phase, each timed on its own (synchronised on a GPU) over
    ``batches``: the forward pieces, the backward of the dense part (from the loss to the
    pooled embeddings) apart from the embeddings' own backward (the scatter of their gradients
    and, for ours, the fused Adagrad update), the dense optimizer's step; "the rest" is the
    whole step (``step_fn``, timed on its own) minus the phases."""
    loss_fn = nn.BCEWithLogitsLoss()
    acc = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(name: str):
        _sync(device)
        t = time.perf_counter()
        yield
        _sync(device)
        acc[name] += time.perf_counter() - t

    for b in batches:
        optimizer.zero_grad(set_to_none=True)
        with phase(PHASES[0]):
            e = embeddings(b.sparse)
        with phase(PHASES[1]):
            d = dense_arch(b.dense)
        e_in = e.detach().requires_grad_()
        with phase(PHASES[2]):
            z = interaction(d, e_in)
        with phase(PHASES[3]):
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


def print_profile(ours: dict[str, float], base: dict[str, float]) -> None:
    print(f"{'phase (ms per step)':<40} {'ours':>9} {'baseline':>9}")
    for name in PHASES:
        print(f"{name:<40} {ours[name]:9.2f} {base[name]:9.2f}")
    print(f"{'step':<40} {sum(ours.values()):9.2f} {sum(base.values()):9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["small", "dcnv2"], default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=None, help="default: 2048 (small), 1024 (dcnv2 on CPU)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per round (default 10 small, 3 dcnv2 on CPU)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile-step", action="store_true", help="print where a step's time goes, phase by phase")
    ap.add_argument("--max-rows", type=int, default=None, help="cap on table rows for dcnv2 (default 200k on CPU, 4M on GPU: two models with fp32 Adagrad state must fit)")
    args = ap.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if args.config == "small":
        bc = small_config(args.batch_size or 2048)
        steps = args.steps or 10
    else:
        bc = dcnv2_config(args.batch_size or (65536 if on_gpu else 1024), args.max_rows or (4_000_000 if on_gpu else 200_000))
        steps = args.steps or (20 if on_gpu else 3)
    cfg = bc.model
    print(f"config {args.config} on {device}: batch {bc.batch_size}, {len(cfg.table_rows)} tables, "
          f"{sum(cfg.table_rows):,} rows x dim {cfg.embedding_dim}, pooling {sum(cfg.pooling)} ids/sample, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    session = TrainingSession(RunConfig.offline(
        *bench_spec(bc), 0, who="bench", profile={"name": "bench", "device_type": device.type}))
    ours_step = session.step  # the engine's own step: schedule, forward, fused backward, optimizers
    torch.manual_seed(0)
    base = BaselineDLRM(cfg, device)
    base_opt = torch.optim.Adagrad(base.parameters(), lr=bc.lr, eps=1e-8)
    base_step = stepper(base, base_opt)

    batches = make_batches(cfg, bc.batch_size, steps, device)
    for step in (ours_step, base_step):  # warm up both
        for b in batches[:2]:
            step(b)
    ours_t, base_t = [], []
    for _ in range(args.rounds):
        ours_t.append(time_steps(ours_step, batches, device))
        base_t.append(time_steps(base_step, batches, device))
    ours_sps = bc.batch_size / statistics.median(ours_t)
    base_sps = bc.batch_size / statistics.median(base_t)

    if args.profile_step:
        m = session.model
        ours_phases = profile_phases(m, m.sparse_arch, m.dense_arch, m.interaction, m.over_arch, ours_step,
                                     session.dense_optimizer, batches, device)
        base_int = BaselineInteraction(base)
        base_phases = profile_phases(base, base.lookups, base.bottom, base_int, base.top, base_step, base_opt,
                                     batches, device)
        print_profile(ours_phases, base_phases)

    flops = mlp_flops_per_sample(cfg)
    bound, rate = gemm_bound(cfg, bc.batch_size, device)
    print(f"MLP + interaction: {flops / 1e6:.2f} MFLOP/sample (fwd+bwd); its GEMMs at batch {bc.batch_size} run at "
          f"{rate / 1e9:.1f} GFLOP/s here (each shape's median of 7)")
    print(f"matrix-multiply bound:   {bound:12,.0f} samples/s")
    print(f"baseline (EmbeddingBag sparse + torch.optim.Adagrad): {base_sps:12,.0f} samples/s  ({base_sps / bound:.2f} of bound)")
    print(f"ours (fused tables + fused Adagrad):                  {ours_sps:12,.0f} samples/s  ({ours_sps / bound:.2f} of bound)")
    print(f"ratio ours / baseline: {ours_sps / base_sps:.2f}x")


if __name__ == "__main__":
    main()
