"""What the user asks of a run set (the options of ``harness run``), and the checks of it that
need neither the benchmark nor the machine: they fail first, in one line, before anything is
loaded or written."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ErrorCategory, HarnessError
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import CachePolicy
from harness.rules.precision import Precision
from harness.runsets.launch import Nodes

DEFAULT_SUBMITTER = "reference"
DEFAULT_STATUS = "Research, Development, or Internal (RDI)"
# the system's availability (``--status``, as MLPerf's system description states it) -> as the log states it
LOG_STATUS = {
    "Available on-premise": "onprem",
    "Available cloud": "cloud",
    "Research, Development, or Internal (RDI)": "research",
    "Preview": "preview",
}


class EmbeddingTierChoice(enum.Enum):
    """Where the user asks the embedding rows to live (``--embedding-tier``)."""

    MEMORY = "memory"  # HBM or DDR (on a sharded profile, the planner's choice between them)
    SSD = "ssd"  # the tables set to the SSD tier (all unless --ssd-tables) in a file, behind a cache in memory
    AUTO = "auto"  # the planner places each table within the profile's capacities (SSD ones behind the cache)


@dataclass(frozen=True)
class RunSetRequest:
    """What the user asked for (the options of ``harness run``)."""

    benchmark: str
    profile: str
    submitter: str = DEFAULT_SUBMITTER
    runs: int | None = None
    results_dir: Path = Path("results")
    seeds: tuple[int, ...] = ()
    resume: bool = False
    division: str = "closed"
    status: str = DEFAULT_STATUS
    threads: int | None = None
    emulate: bool = False
    comm: CommConfig = CommConfig()  # the codec of each collective: forward, backward, allreduce
    embedding_tier: EmbeddingTierChoice = EmbeddingTierChoice.MEMORY
    cache_fraction: float = 0.05
    cache_policy: CachePolicy = CachePolicy.LRU
    ssd_tables: tuple[int, ...] | None = None  # set to the SSD tier (indices); with SSD, None: all
    data: Path | None = None  # the dataset's files (--data); None: the benchmark's generator
    # where a dataset that needs a cache of its own keeps it (--data-cache: Yambda's columns);
    # None: the dataset's default folder
    data_cache: Path | None = None
    # the SSD tier's rows move with O_DIRECT where the file system takes it (--ssd-io direct), or
    # through the page cache (buffered: the same values, not the drive's speed)
    direct_io: bool = True
    overlap: bool = True  # overlap a sharded run's communication with its computation (the same arithmetic)
    step_phases: bool = True  # each run measures where its steps' time goes (harness_step_phases)
    trace: bool = False  # each run writes a profiler trace of a few steps, every rank's, in its staging folder
    # --precision; None: the submitter config's choice for the profile, else the fastest precision
    # the hardware computes natively
    precision: Precision | None = None
    nodes: Nodes = field(default_factory=Nodes)  # the launchers: this node's rank among them (--nnodes, --node-rank, ...)


def check_request(request: RunSetRequest) -> None:
    """Refuse a request whose division, status, submitter name or closed choices are not ones a
    run set can be made with."""
    if request.division not in ("closed", "open"):
        raise HarnessError(f"division must be closed or open, not {request.division!r}")
    if request.status not in LOG_STATUS:
        raise HarnessError(f"status must be one of {', '.join(map(repr, LOG_STATUS))}")
    if not request.submitter or "/" in request.submitter or request.submitter.startswith("."):
        raise HarnessError(f"submitter name {request.submitter!r} cannot be a directory name")
    _check_request_types(request)


_REQUEST_TYPES: dict[str, type | tuple[type, ...]] = {
    "comm": CommConfig, "embedding_tier": EmbeddingTierChoice, "cache_policy": CachePolicy,
    "precision": (Precision, type(None))}


def _check_request_types(request: RunSetRequest) -> None:
    """The request's closed choices are enums (the CLI converts its options): a name where a
    member belongs is a caller's slip, said in one line rather than compared wrongly later."""
    for name, types in _REQUEST_TYPES.items():
        value = getattr(request, name)
        if not isinstance(value, types):
            wanted = types.__name__ if isinstance(types, type) else types[0].__name__
            raise HarnessError(f"RunSetRequest.{name} must be a {wanted}, not {type(value).__name__} {value!r}",
                               ErrorCategory.BAD_INPUT)
