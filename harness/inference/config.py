"""What ``harness infer`` runs: the scenarios, the variants (the systems served) and the
settings (:class:`InferConfig`), checked when built.

Torch-free (it imports no model), so that ``harness infer --help`` builds its options from
these defaults without loading torch.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ErrorCategory, HarnessError
from harness.inference import mlperf
from harness.reference.planner.types import CachePolicy, RowReader
from harness.rules.precision import Precision, parse_precision

DEFAULT_RESULTS = Path("results")
DEFAULT_STORAGE_LATENCY_US = 100.0  # a NAND-flash read; 3D XPoint (Optane) is about 10 us
# reads in flight at once: an NVMe queue holds far more; this machine's disk read fastest at 128, also
# beside a neighbour reading the same disk (measured: docs/performance.md, "SDM levers" and "Figures
# behind the code's choices")
DEFAULT_STORAGE_QUEUE_DEPTH = 128
# The SSD variants' caches start warm with the training data's hottest rows, this share of them
# pinned (never evicted), the rest under the cache's policy; --cold-cache starts them empty, nothing
# pinned. All of it: a query's reads and the lookups' CPU fell with every share pinned, since this
# benchmark serves data drawn as its training data are (docs/performance.md, "SDM levers"); a
# workload that drifts would leave a share to the policy (--pin-fraction 0.9)
DEFAULT_PIN_FRACTION = 1.0
SYSTEM_PREFIX = "harness"
VARIANT_KINDS = ("memory", "ssd", "ssd-latency")
# --quick: LoadGen's minimum duration and query count instead of the official ones
QUICK_MIN_DURATION_MS = 2000
QUICK_MIN_QUERY_COUNT = 100
# ... but Server's: LoadGen's early stopping judges its p99 only from about 460 queries on (with
# none over the bound; 100 "would need 359 more"), so fewer make every quick Server run INVALID
QUICK_SERVER_MIN_QUERY_COUNT = 600
QUICK_ACCURACY_SAMPLES = 32  # the accuracy runs' samples, users (LoadGen's accuracy_sample_count_override)
# what to do once an I/O fault's cause is gone: a model already trained and saved is reused
AGAIN = "run the same command again (a model already trained is reused)"


class Scenario(enum.Enum):
    """A LoadGen scenario, as the results layout spells it."""

    OFFLINE = "offline"
    SERVER = "server"


@dataclass(frozen=True)
class Variant:
    """One system served: its tables in memory (``ssd`` False) or on the SSD tier, each read
    taking ``latency_us`` more."""

    name: str
    ssd: bool
    latency_us: float = 0.0

    @property
    def system(self) -> str:
        return f"{SYSTEM_PREFIX}-{self.name}"


def variants_for(latency_us: float, kinds: Sequence[str] = VARIANT_KINDS) -> tuple[Variant, ...]:
    """The variants of ``kinds`` (``memory``, ``ssd``, ``ssd-latency``: the last only with a latency)."""
    out = [Variant("memory", False)] if "memory" in kinds else []
    if "ssd" in kinds:
        out.append(Variant("ssd", True))
    if latency_us > 0 and "ssd-latency" in kinds:
        out.append(Variant(f"ssd-{latency_us:g}us", True, latency_us))
    return tuple(out)


@dataclass(frozen=True)
class InferConfig:
    """What ``harness infer`` runs.

    Attributes:
        quick: shorter LoadGen runs (``QUICK_MIN_DURATION_MS``, ``QUICK_MIN_QUERY_COUNT``):
            not a valid MLPerf result, and every output says so.
        results: the results tree (``<results>/<system>/<model>/<scenario>/...``).
        storage_latency_us: the per-read latency of the third variant (0: no third variant).
        storage_queue_depth: the SSD variants' reads in flight at once (:class:`PreadRows`).
        offline_qps, server_qps: the target QPS written to every variant's ``user.conf``
            (``None``: each variant's calibrated rate; Server: the highest rate a short search over LoadGen runs passed).
        user_conf: one ``user.conf`` for every variant instead of the generated ones.
        high_accuracy: check the 99.9% target (``dlrm-v2-99.9``) instead of 99% (``dlrm-v2-99``).
        direct: read the rows file with O_DIRECT where the file system takes it.
        row_reader: what reads the rows (the compiled io_uring reader where it loads, or Python threads).
        train_steps: train exactly this many steps; ``None``: as the benchmark's run does.
        model_dir: where the trained model is kept; ``None``: :func:`default_model_dir`.
        max_batch: the rows one Offline model call answers, about (whole users: a call ends with the
            user that reaches it); Server answers each query (one user) in a call of its own.
        threads: torch's intra-op threads.
        precision: the precision the served model is trained in (fp32, bf16, fp16: the dense
            layers, the tables' storage), as ``harness run --precision`` trains; fp32 by default,
            so the model served is the same on every machine (serving computes in fp32).
        warm_cache: the SSD variants' caches start holding the rows the training data looks up
            most (counted over its first :data:`~harness.inference.model.WARM_SAMPLES` samples), as a
            deployment loads its hot rows at start (the default: see :data:`DEFAULT_PIN_FRACTION`);
            otherwise they start empty (cold, ``--cold-cache``) and nothing is pinned.
        pin_fraction: of a warm cache, the share that holds the hottest of those rows for good
            (never evicted); the rest is managed by ``cache_policy``.
        coalesce: a row missing in several lookup calls in flight at once is read once, the
            others wait for that read and share it (``--no-coalesce``: each call reads its own).
    """

    benchmark: str = "dlrm_synthetic"
    scenarios: tuple[Scenario, ...] = (Scenario.OFFLINE, Scenario.SERVER)
    cache_fraction: float = 0.2
    cache_policy: CachePolicy = CachePolicy.LRU
    storage_latency_us: float = DEFAULT_STORAGE_LATENCY_US
    storage_queue_depth: int = DEFAULT_STORAGE_QUEUE_DEPTH
    quick: bool = False
    results: Path = DEFAULT_RESULTS
    offline_qps: float | None = None
    server_qps: float | None = None
    user_conf: Path | None = None
    high_accuracy: bool = False
    direct: bool = True
    row_reader: RowReader = RowReader.AUTO
    variant_kinds: tuple[str, ...] = VARIANT_KINDS
    seed: int = 0
    train_steps: int | None = None
    model_dir: Path | None = None
    max_batch: int = 16384
    threads: int = 1
    precision: str = Precision.FP32.value
    # --quick's Server query count (the suite's shared run takes LoadGen's old 100, asserting no verdict)
    quick_server_queries: int = QUICK_SERVER_MIN_QUERY_COUNT
    warm_cache: bool = True
    pin_fraction: float = DEFAULT_PIN_FRACTION
    coalesce: bool = True

    def __post_init__(self) -> None:
        parse_precision(self.precision, what="--precision")
        checks = [
            (0.0 < self.cache_fraction <= 1.0, f"cache fraction {self.cache_fraction}: give a fraction in (0, 1]"),
            (0.0 <= self.pin_fraction <= 1.0, f"pin fraction {self.pin_fraction}: give a fraction in [0, 1]"),
            (self.storage_latency_us >= 0, f"storage latency {self.storage_latency_us} us: give 0 or more"),
            (self.storage_queue_depth >= 1, f"storage queue depth {self.storage_queue_depth}: give at least 1"),
            (self.offline_qps is None or self.offline_qps > 0, f"offline QPS {self.offline_qps}: give a positive rate"),
            (self.server_qps is None or self.server_qps > 0, f"server QPS {self.server_qps}: give a positive rate"),
            (self.train_steps is None or self.train_steps >= 1, f"train steps {self.train_steps}: give at least 1"),
            (self.max_batch >= 1, f"max batch {self.max_batch}: give at least 1"),
            (self.threads >= 1, f"threads {self.threads}: give at least 1"),
            (bool(self.scenarios), "no scenario to run"),
            (bool(variants_for(self.storage_latency_us, self.variant_kinds)),
             "no variant to run (ssd-latency needs a --storage-latency-us above 0)"),
            (self.user_conf is None or self.user_conf.is_file(), f"{self.user_conf}: no such user.conf"),
        ]
        for ok, message in checks:
            if not ok:
                raise HarnessError(message, ErrorCategory.NOT_FOUND if "no such" in message else ErrorCategory.BAD_INPUT)

    @property
    def model_name(self) -> str:
        """The benchmark's name in the results layout: ``dlrm-v2-99`` or ``dlrm-v2-99.9``."""
        return "dlrm-v2-99.9" if self.high_accuracy else "dlrm-v2-99"

    @property
    def label(self) -> str | None:
        """None for the official settings; else why this is not a valid MLPerf result."""
        if not self.quick:
            return None
        return (f"{mlperf.NOT_VALID} (--quick: min duration {QUICK_MIN_DURATION_MS / 1000:g} s and min query "
                f"count {QUICK_MIN_QUERY_COUNT} (Server {self.quick_server_queries}) instead of mlperf.conf's, "
                f"accuracy on {QUICK_ACCURACY_SAMPLES} "
                f"samples (users) of the eval split)")


def default_model_dir(benchmark: str, seed: int, train_steps: int | None,
                      precision: str = Precision.FP32.value, results: Path = DEFAULT_RESULTS) -> Path:
    """``<results>/.harness/models/<benchmark>-seed<N>[-steps<K>][-<precision>]`` (no suffix for
    fp32), under the run's ``--results`` (``results`` of the current directory by default)."""
    steps = f"-steps{train_steps}" if train_steps is not None else ""
    trained_in = f"-{precision}" if precision != Precision.FP32.value else ""
    return Path(results) / ".harness" / "models" / f"{benchmark}-seed{seed}{steps}{trained_in}"
