"""Where a training step's time goes, as a run measures it (``harness_step_phases``,
:mod:`harness.reference.timing.phases`), checked two ways on the default benchmark
(``dlrm_synthetic``; one process on this machine, as ``harness run`` trains it):

* **coverage**: the phases' sum against the step's own time (from the first moment of its batch
  wait to the end of its last phase), over the measured steps after the warm-up: what the
  phases leave unexplained (the step's own bookkeeping between them) is 1 minus this ratio;
* **cost**, two ways: (1) the training time with the phases measured against without
  (``--no-step-phases``), the same steps from the same seed, in pairs of rounds (each pair's
  order swapped), the median of the pairs' ratios: what a user sees, within this machine's noise
  (a few % between rounds on a shared 2-core host); (2) the clock's own cost, timed here: the
  phases entered per step times the seconds of one phase entered and left (a million of them),
  against the mean step: what measuring adds, without the noise.

    python bench/step_phases.py                                 # 9 pairs of rounds of 100 steps
    python bench/step_phases.py --benchmark dlrmv4_synthetic --steps 50

The last three lines are exactly::

    phases / step time: X.XXX
    cost of the clock: N phases a step x T us = Z.ZZ% of the step
    overhead of measuring: +Y.YY% (median of P pairs of rounds)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import TrainingSession
from harness.reference.timing import phases
from harness.rules.specs import load_benchmark


def train(spec, steps: int, measured: bool, threads: int) -> tuple[float, TrainingSession]:
    """Seconds of ``steps`` training steps (no evaluation) of a fresh session, and the session."""
    session = TrainingSession(RunConfig.offline(spec.raw, dict(spec.reference_hyperparameters), 1, who="bench",
                                                step_phases=measured, threads=threads))
    try:
        t0 = time.perf_counter()
        session.train(eval_at=[], until=steps, stop_at_target=False)
        return time.perf_counter() - t0, session
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="dlrm_synthetic")
    parser.add_argument("--steps", type=int, default=100, help="training steps a round (default 100)")
    parser.add_argument("--rounds", type=int, default=9, help="pairs of rounds, measured and not (default 9)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = load_benchmark(args.benchmark)
    train(spec, min(args.steps, 20), True, args.threads)  # warm the process up (allocator, kernels)
    ratios, entered = [], []
    step_s, phase_s = [], []
    for r in range(args.rounds):
        seconds = {}
        for measured in (True, False) if r % 2 == 0 else (False, True):
            seconds[measured], session = train(spec, args.steps, measured, args.threads)
            if measured:
                kept = session.clock.steps[phases.WARMUP_STEPS:]
                step_s += [s for _, s, _ in kept]
                phase_s += [p for _, _, p in kept]
                entered.append(session.clock.entered / max(len(session.clock.steps), 1))
        ratios.append(seconds[True] / seconds[False])
        print(f"pair {r + 1}: measured {seconds[True]:.3f} s, unmeasured {seconds[False]:.3f} s, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    per_phase = np.stack(phase_s).mean(axis=0)
    mean_step = float(np.mean(step_s))
    print(f"{args.benchmark}: {args.steps} steps a round, {args.rounds} pairs, {args.threads} threads; "
          f"{len(step_s)} measured steps after the warm-up, mean step {mean_step * 1e3:.3f} ms:")
    for name, seconds_ in zip(phases.PHASES, per_phase, strict=True):
        print(f"  {name:20s} {seconds_ * 1e3:9.3f} ms  {seconds_ / mean_step:6.1%}")
    clock, n = phases.PhaseClock(), 1_000_000
    t0 = time.perf_counter()
    for _ in range(n):
        with clock.phase(phases.OPTIMIZER):
            pass
    one = (time.perf_counter() - t0) / n
    per_step = float(np.mean(entered))
    print(f"phases / step time: {float(np.sum(phase_s)) / float(np.sum(step_s)):.3f}")
    print(f"cost of the clock: {per_step:.0f} phases a step x {one * 1e6:.2f} us = {per_step * one / mean_step:.2%} "
          f"of the step")
    print(f"overhead of measuring: {(statistics.median(ratios) - 1) * 100:+.2f}% (median of {args.rounds} pairs "
          f"of rounds)")


if __name__ == "__main__":
    main()
