"""Is synthetic data generation the bottleneck of training? Measured on a benchmark's config.

    python bench/datagen.py [--benchmark dlrm_synthetic] [--batches 40]

Prints, in one run: the generator's rate alone (samples/s, one thread), the training step's
rate alone on batches already in memory, and the rate of the two together as the trainer
runs them (generation in a prefetch thread). The last line is the ratio of the combined
rate to the training-alone rate: 1.0 means generation costs training nothing.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from harness.reference.data.datasets import SyntheticDataset
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import TrainingSession
from harness.rules.specs import load_benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="dlrm_synthetic")
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    spec = load_benchmark(args.benchmark)
    session = TrainingSession(RunConfig.offline(spec.raw, spec.reference_hyperparameters, 0, who="bench"))
    data = session.dataset
    assert isinstance(data, SyntheticDataset)
    gbs, n = session.global_batch_size, args.batches

    t = time.perf_counter()
    in_memory = list(itertools.islice(data.train_batches(gbs, start=session.steps_per_epoch - n), n))
    gen_rate = n * gbs / (time.perf_counter() - t)

    for b in in_memory[:3]:
        session.step(b)
    t = time.perf_counter()
    for b in in_memory:
        session.step(b)
    train_rate = n * gbs / (time.perf_counter() - t)

    t = time.perf_counter()
    session.train(eval_at=[], until=session.step_count + n, stop_at_target=False)  # the session's own feed
    combined_rate = n * gbs / (time.perf_counter() - t)

    print(f"benchmark {spec.name}: batch {gbs}, {torch.get_num_threads()} torch threads")
    print(f"generation alone (one thread):        {gen_rate:12,.0f} samples/s")
    print(f"training alone (batches in memory):   {train_rate:12,.0f} samples/s")
    print(f"training with generation (prefetch):  {combined_rate:12,.0f} samples/s")
    print(f"generation / training rate: {gen_rate / train_rate:.2f}x")
    print(f"ratio combined / training alone: {combined_rate / train_rate:.2f}")


if __name__ == "__main__":
    main()
