"""The projected time to train: a benchmark on a system at a batch size, to the score MLPerf gives.

A run trains until the first evaluation at or above the target; MLPerf's score is the olympic mean
of the run set's times. The projection takes the reference's convergence at the batch size (its
RCPs, found as the checker finds them: :func:`harness.rules.rcp.convergence_point`), trains that
many samples at the projected step, and evaluates at the benchmark's cadence, each evaluation the
whole eval split at its eval batch size::

    minutes = (samples / batch x step + samples / eval interval x eval_samples / eval batch x eval step) / 60

The band is the device class's (``constants.yaml``): the largest ratio between projected and
measured scores the constants were fitted with.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ErrorCategory, HarnessError
from harness.projection.constants import Constants, load_constants
from harness.projection.step import StepProjection, eval_step, training_step
from harness.projection.system import System
from harness.projection.workload import benchmark_workload
from harness.reference.planner import CommPrecision, Plan, PlannerConfig, plan_tables
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.rcp import ConvergencePoint, convergence_point
from harness.rules.specs import BenchmarkSpec

DEFAULT_CACHE_FRACTION = 0.05  # as `harness run` and `harness plan`


@dataclass(frozen=True)
class Projection:
    """A projected run of ``benchmark`` on ``system`` at ``batch_size``: its steps, how much it
    trains and evaluates, and the score in minutes with its band."""

    benchmark: str
    system: System
    batch_size: int
    precision: str
    plan: Plan
    step: StepProjection
    eval_step: StepProjection
    convergence: ConvergencePoint
    samples_to_target: float
    evaluations: float
    eval_seconds_each: float
    band: float
    input_seconds_per_sample: float = 0.0  # one core's seconds to generate a sample (0: not generated here)

    @property
    def train_seconds(self) -> float:
        return self.samples_to_target / self.batch_size * self.step.seconds

    @property
    def eval_seconds(self) -> float:
        return self.evaluations * self.eval_seconds_each

    @property
    def minutes(self) -> float:
        return (self.train_seconds + self.eval_seconds) / 60

    @property
    def band_minutes(self) -> tuple[float, float]:
        return self.minutes / self.band, self.minutes * self.band

    def to_dict(self) -> dict[str, object]:
        low, high = self.band_minutes
        return {
            "benchmark": self.benchmark, "system": self.system.describe(), "device": self.system.device.name,
            "batch_size": self.batch_size, "precision": self.precision,
            "step": self.step.to_dict(), "eval_step": self.eval_step.to_dict(),
            "embeddings_only_step_s": self.plan.step_time_s, "imbalance": self.plan.imbalance,
            "convergence": {"mean": self.convergence.mean, "unit": self.convergence.unit, "how": self.convergence.how},
            "samples_to_target": self.samples_to_target, "evaluations": self.evaluations,
            "eval_seconds_each": self.eval_seconds_each, "train_seconds": self.train_seconds,
            "eval_seconds": self.eval_seconds, "minutes": self.minutes,
            "band_minutes": [low, high], "band": self.band,
        }


def samples_to_target(spec: BenchmarkSpec, point: ConvergencePoint) -> float:
    """Training samples to reach the target: the convergence point's samples, or its epochs (less the
    benchmark's epoch origin) times the epoch's samples."""
    if point.unit == "samples":
        return point.mean
    return max(point.mean - spec.epoch_num_origin, 0.0) * int(spec.dataset["train_samples"])


def eval_interval(spec: BenchmarkSpec, batch_size: int) -> float:
    """Training samples between evaluations."""
    if spec.eval_in_samples:
        return float(spec.eval_interval_samples(batch_size))
    return spec.eval_every_epoch_fraction * int(spec.dataset["train_samples"])


def plan_for(spec: BenchmarkSpec, system: System, batch_size: int, precision: str) -> Plan:
    """The embedding plan a run of ``spec`` takes on the system: tables stored, and their vectors
    sent, at the run's precision (fp32 for fp32, else two bytes), caches as `harness run` makes them."""
    table_bytes = 4 if precision in ("fp32", "tf32") else 2
    comm = {"fp32": CommPrecision.FP32, "tf32": CommPrecision.FP32, "fp16": CommPrecision.FP16}.get(
        precision, CommPrecision.BF16)
    config = PlannerConfig(batch_size=batch_size, comm_precision=comm, param_bytes_per_element=table_bytes,
                           ddr_cache_fraction=DEFAULT_CACHE_FRACTION, ssd_cache_fraction=DEFAULT_CACHE_FRACTION)
    return plan_tables(tables_for_benchmark(spec), system.profile, config)


def project(spec: BenchmarkSpec, system: System, *, batch_size: int | None = None, precision: str | None = None,
            constants: Constants | None = None, plan: Plan | None = None,
            input_seconds_per_sample: float = 0.0) -> Projection:
    """The projected time to train of ``spec`` on ``system`` (batch: the spec's reference global batch;
    precision: the lowest the device computes natively; ``plan``: the embedding plan, when it is made
    already: a plan does not depend on the constants; ``input_seconds_per_sample``: one core's seconds
    to generate a sample, where a synthetic benchmark's data is generated on the ranks' own cores)."""
    workload = benchmark_workload(spec)
    batch = int(batch_size or spec.reference_hyperparameters["global_batch_size"])
    if batch < system.ranks:
        raise HarnessError(f"a global batch of {batch} cannot be split over {system.ranks} ranks",
                           ErrorCategory.BAD_INPUT)
    precision = system.device.compute_precision(precision or system.native_precision())
    eff = (constants or load_constants()).of(system.device_class)
    plan = plan or plan_for(spec, system, batch, precision)
    point = convergence_point(spec.name, batch)
    samples = samples_to_target(spec, point)
    evaluation = eval_step(workload, system, plan, precision, eff, spec.eval_batch_size,
                           input_seconds_per_sample=input_seconds_per_sample)
    eval_samples = int(spec.dataset["eval_samples"])
    return Projection(
        benchmark=spec.name, system=system, batch_size=batch, precision=precision, plan=plan,
        step=training_step(workload, system, plan, precision, eff, input_seconds_per_sample=input_seconds_per_sample),
        eval_step=evaluation, input_seconds_per_sample=input_seconds_per_sample,
        convergence=point, samples_to_target=samples, evaluations=max(samples / eval_interval(spec, batch), 1.0),
        eval_seconds_each=eval_samples / spec.eval_batch_size * evaluation.seconds, band=eff.band,
    )
