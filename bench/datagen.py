"""Is synthetic data generation the bottleneck of training? Measured on a benchmark's config.

    python bench/datagen.py [--benchmark dlrm_synthetic] [--batches 40]

Prints, in one run: the generator's rate alone (samples/s, one thread), the training step's
rate alone on batches already in memory, and the rate of the two together as the trainer
runs them (generation in a prefetch thread). The last line is the ratio of the combined
rate to the training-alone rate: 1.0 means generation costs training nothing.
"""

from __future__ import annotations

import argparse
import time

import torch

from harness.reference import synthetic
from harness.reference.embeddings import SparseOptimizerConfig
from harness.reference.model import DLRM
from harness.reference.trainer import _prefetch, synthetic_data
from harness.rules.specs import load_benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="dlrm_synthetic")
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    spec = load_benchmark(args.benchmark)
    hp = spec.reference_hyperparameters
    gbs, lr = int(hp["global_batch_size"]), float(hp["opt_base_learning_rate"])
    data = synthetic_data(spec)
    order = synthetic.EpochOrder.from_seed(0, spec.dataset["train_samples"])

    def batches(start: int):
        it = synthetic.train_batches(data, order, gbs, start_batch=start)
        return [next(it) for _ in range(args.batches)]

    t = time.perf_counter()
    in_memory = batches(0)
    gen_rate = args.batches * gbs / (time.perf_counter() - t)

    model = DLRM(spec.model_config(), SparseOptimizerConfig(kind=spec.embedding_optimizer, learning_rate=lr))
    opt = torch.optim.Adagrad(model.dense_parameters(), lr=lr, eps=1e-8)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def step(b) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(b.dense, b.sparse), b.labels).backward()
        opt.step()

    for b in in_memory[:3]:
        step(b)
    t = time.perf_counter()
    for b in in_memory:
        step(b)
    train_rate = args.batches * gbs / (time.perf_counter() - t)

    it = _prefetch(synthetic.train_batches(data, order, gbs, start_batch=args.batches))
    t = time.perf_counter()
    for _ in range(args.batches):
        step(next(it))
    combined_rate = args.batches * gbs / (time.perf_counter() - t)

    print(f"benchmark {spec.name}: batch {gbs}, {torch.get_num_threads()} torch threads")
    print(f"generation alone (one thread):        {gen_rate:12,.0f} samples/s")
    print(f"training alone (batches in memory):   {train_rate:12,.0f} samples/s")
    print(f"training with generation (prefetch):  {combined_rate:12,.0f} samples/s")
    print(f"generation / training rate: {gen_rate / train_rate:.2f}x")
    print(f"ratio combined / training alone: {combined_rate / train_rate:.2f}")


if __name__ == "__main__":
    main()
