"""Fit the projection's constants (harness/projection/constants.yaml) on real results.

    python tools/fit_projection.py tests/data/mlperf-logs --local results   # fit, print the YAML
    python tools/fit_projection.py tests/data/mlperf-logs --check /path/to/more/results  # and report on others

Per device class (accelerators; CPUs), the four constants (GEMM, memory and link efficiencies, the
seconds of one operation) that minimise the sum of squared log ratios projected / measured over the
class's run sets of the roots given; ``--local`` adds run sets that `harness run` wrote on this
machine (projected as the ``local`` system). The efficiencies are bounded to (0.02, 1] and an
operation to [0.1, 200] microseconds: physical ranges. Prints each run set's ratio before and after,
the summary line of each root, and the constants as YAML to paste into constants.yaml with the date.
``--check`` roots are reported with the fitted constants and never fitted on; each class's band is
the ratio within which 9 in 10 of its run sets fall, fitted and checked together.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.optimize

from harness.cli.project import input_cost
from harness.hw_profiles.detection import detect
from harness.projection.against import Comparison, ThisMachine, compare_tree, summarize
from harness.projection.constants import Constants, DeviceClass, Efficiencies, load_constants
from harness.projection.train_time import project
from harness.rules.specs import load_benchmark

FIELDS = ("gemm_efficiency", "memory_efficiency", "gather_efficiency", "link_efficiency", "seconds_per_op")
LINK_EFFICIENCY = 0.8  # not fitted: NCCL's all-to-all and all-reduce at these sizes (nccl-tests' bus bandwidth)
CPU_SECONDS_PER_OP = 2e-5  # not fitted: a CPU framework's operator call (dispatch, autograd, allocation, a
# parallel region's fork and join); 0.1-4% of a CPU cluster's step at MLPerf's batch sizes
# What each class fits, within physical ranges (a GEMM at most 0.8 of peak: cuBLAS's and oneDNN's large
# GEMMs; a stream at most 0.9: STREAM; an accelerator's operation 1-100 us: a kernel's launch). A CPU's
# streams are priced at the accelerators' stream efficiency: one figure for streaming any memory, and
# the two CPU clusters of the shared logs fit the CPUs' other two.
FREE = {DeviceClass.ACCELERATOR: {"gemm_efficiency": (0.05, 0.8), "memory_efficiency": (0.05, 0.9),
                                  "gather_efficiency": (0.02, 0.9), "seconds_per_op": (1e-6, 1e-4)},
        DeviceClass.CPU: {"gemm_efficiency": (0.05, 0.8), "gather_efficiency": (0.005, 0.9)}}


@dataclass
class Point:
    comparison: Comparison

    def ratio(self, constants: Constants) -> float:
        p = self.comparison.projection
        assert p is not None and self.comparison.measured_minutes
        again = project(load_benchmark(p.benchmark), p.system, batch_size=p.batch_size, precision=p.precision,
                        constants=constants, plan=p.plan, input_seconds_per_sample=p.input_seconds_per_sample)
        return again.minutes / self.comparison.measured_minutes


def _constants(base: Constants, device_class: DeviceClass, free: dict[str, float]) -> Constants:
    e = base.of(device_class)
    values = {f: getattr(e, f) for f in FIELDS} | {"link_efficiency": LINK_EFFICIENCY} | free
    if device_class is DeviceClass.CPU:
        values |= {"memory_efficiency": base.of(DeviceClass.ACCELERATOR).memory_efficiency,
                   "seconds_per_op": CPU_SECONDS_PER_OP, **free}
    return base.with_class(device_class, Efficiencies(**values, band=e.band))


def fit_class(points: list[Point], base: Constants, device_class: DeviceClass) -> Constants:
    """The constants of one class that minimise the squared log ratios of its points (and the worst
    of them as much again: a fit that leaves no run set far off), the free ones within their ranges."""
    names = list(FREE[device_class])
    low, high = (np.log([FREE[device_class][n][i] for n in names]) for i in (0, 1))
    start = np.clip(np.log([getattr(base.of(device_class), n) for n in names]), low, high)

    def constants(x: np.ndarray) -> Constants:
        return _constants(base, device_class, dict(zip(names, (float(v) for v in np.exp(x)))))

    def loss(x: np.ndarray) -> float:
        logs = [math.log(p.ratio(constants(x))) for p in points]
        return sum(v * v for v in logs) + len(logs) * max(v * v for v in logs)

    best = scipy.optimize.minimize(loss, start, method="Nelder-Mead", bounds=list(zip(low, high)),
                                   options={"xatol": 1e-4, "fatol": 1e-8, "maxiter": 4000})
    return constants(best.x)


def band(points: list[Point], constants: Constants) -> float:
    """The ratio (projected / measured or its inverse) within which 9 in 10 of the points fall,
    rounded up to 0.05: how far to trust a projection of the class."""
    spread = sorted(max(r, 1 / r) for r in (p.ratio(constants) for p in points))
    return math.ceil(spread[min(len(spread) - 1, math.ceil(0.9 * len(spread)) - 1)] * 20) / 20


def report(title: str, comparisons: list[Comparison], constants: Constants) -> None:
    print(f"== {title}")
    redone = []
    for c in comparisons:
        if c.projection is None:
            print(f"  {c.label}: not projected: {c.reason}")
            redone.append(c)
            continue
        r = Point(c).ratio(constants)
        p = c.projection
        again = Comparison(c.label, c.path, c.benchmark, c.measured_minutes,
                           project(load_benchmark(p.benchmark), p.system, batch_size=p.batch_size,
                                   precision=p.precision, constants=constants, plan=p.plan,
                                   input_seconds_per_sample=p.input_seconds_per_sample))
        redone.append(again)
        print(f"  {c.label:72s} measured {c.measured_minutes:9.3f} projected {again.projected_minutes:9.3f}  x{r:5.2f}")
    print("  " + summarize(redone).line())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path, help="results trees to fit on")
    parser.add_argument("--local", type=Path, action="append", default=[], help="this machine's harness results")
    parser.add_argument("--local-bandwidth", type=float, default=None,
                        help="GB/s: this machine's copy bandwidth when the --local runs were made (a virtual "
                             "machine's moves over the day; default: measured now)")
    parser.add_argument("--check", type=Path, action="append", default=[], help="results trees to report on only")
    args = parser.parse_args(argv)
    detected = detect()
    base = load_constants()
    fit_sets = {str(r): compare_tree(r) for r in args.roots}
    here = ThisMachine(detected, memory_bw_bytes_per_s=args.local_bandwidth * 1e9 if args.local_bandwidth else None,
                       input_cost=input_cost)
    fit_sets.update({str(r): compare_tree(r, here=here) for r in args.local})
    points = [Point(c) for cs in fit_sets.values() for c in cs if c.projection is not None]
    checked = {str(r): compare_tree(r, here=here) for r in args.check}
    held = [Point(c) for cs in checked.values() for c in cs if c.projection is not None]
    fitted = base
    for device_class in DeviceClass:
        def of_class(pts: list[Point]) -> list[Point]:
            return [p for p in pts if p.comparison.projection.system.device_class is device_class]  # type: ignore[union-attr]

        if of_class(points):
            fitted = fit_class(of_class(points), fitted, device_class)
            e = fitted.of(device_class)
            trust = max(band(of_class(points + held), fitted), 1.05)
            fitted = fitted.with_class(device_class, Efficiencies(**{f: getattr(e, f) for f in FIELDS}, band=trust))
    for name, cs in fit_sets.items():
        report(f"{name} (fitted on)", cs, fitted)
    for name, cs in checked.items():
        report(f"{name} (not fitted on)", cs, fitted)
    print("classes:")
    for device_class in DeviceClass:
        e = fitted.of(device_class)
        print(f"  {device_class.value}:")
        for f in (*FIELDS, "band"):
            print(f"    {f}: {getattr(e, f):.3g}")


if __name__ == "__main__":
    main()
