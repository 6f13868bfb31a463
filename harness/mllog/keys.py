"""MLLOG key names: MLPerf's (the names and values of ``mlperf_logging.mllog.constants``, kept here
so that a reader of logs does not pay for importing that package: ``tests/test_layers.py`` checks
every one against it) and the harness's own ``harness_*`` records. Code names a key through this
module, never as a string of its own.
"""

from __future__ import annotations

# ---- MLPerf's keys, as mlperf_logging.mllog.constants names them
CACHE_CLEAR = "cache_clear"
INIT_START = "init_start"
INIT_STOP = "init_stop"
RUN_START = "run_start"
RUN_STOP = "run_stop"
EPOCH_START = "epoch_start"
EPOCH_STOP = "epoch_stop"
EVAL_START = "eval_start"
EVAL_STOP = "eval_stop"
EVAL_ACCURACY = "eval_accuracy"
SUBMISSION_BENCHMARK = "submission_benchmark"
SUBMISSION_ORG = "submission_org"
SUBMISSION_DIVISION = "submission_division"
SUBMISSION_STATUS = "submission_status"
SUBMISSION_PLATFORM = "submission_platform"
SEED = "seed"
TENSOR_PARALLELISM = "tensor_parallelism"
PIPELINE_PARALLELISM = "pipeline_parallelism"
CONFIG_FILENAME = "config_filename"
TRAIN_SAMPLES = "train_samples"
EVAL_SAMPLES = "eval_samples"
LOWEST_NUMERICAL_PRECISION_IN_LINEAR = "lowest_numerical_precision_in_linear"
LOWEST_NUMERICAL_PRECISION_IN_COMM = "lowest_numerical_precision_in_comm"
GLOBAL_BATCH_SIZE = "global_batch_size"
SAMPLES_COUNT = "samples_count"
MAX_SEQUENCE_LENGTH = "max_sequence_length"
EVAL_EVERY_DATA_PCT = "eval_every_data_pct"
OPT_NAME = "opt_name"
# metadata fields and values
EPOCH_NUM = "epoch_num"
STATUS = "status"
ABORTED = "aborted"
SUCCESS = "success"

# ---- MLPerf's keys that the installed mlperf_logging's constants do not name (its rules do)
DATA_PARALLELISM = "data_parallelism"
EVAL_ERROR = "eval_error"  # the quality metric of benchmarks scored by an error, not an accuracy
TRACKED_STATS = "tracked_stats"
# the seconds of one training step, which some submitters log (on its own or in tracked_stats)
# instead of a throughput
TRAIN_STEP_TIME = "train_step_time"
# the fields of tracked_stats (its value's throughput, its metadata's step), and the reason a
# run_stop's metadata may give, as MLPerf's reference implementations write them
THROUGHPUT = "throughput"
STEP = "step"
REASON = "reason"

# ---- the harness's own records (the checker ignores unknown keys; ours start harness_)
HARNESS_BORROWED_FROM = "harness_borrowed_from"
HARNESS_COMM_CODECS = "harness_comm_codecs"
HARNESS_COMM_OVERLAP = "harness_comm_overlap"
HARNESS_COMM_PROJECTION = "harness_comm_projection"
HARNESS_COMM_STATS = "harness_comm_stats"
HARNESS_DATASET = "harness_dataset"
HARNESS_EMBEDDING_CACHE = "harness_embedding_cache"
HARNESS_EMBEDDING_PRECISION = "harness_embedding_precision"
HARNESS_EMULATED = "harness_emulated"
HARNESS_EMULATION_SCALE = "harness_emulation_scale"
HARNESS_FINGERPRINT = "harness_fingerprint"
HARNESS_MEMORY = "harness_memory"
HARNESS_NODES = "harness_nodes"
HARNESS_PROFILE = "harness_profile"
HARNESS_RULESET = "harness_ruleset"
HARNESS_SELF_CHECK = "harness_self_check"
HARNESS_SHARDING_PLAN = "harness_sharding_plan"
# per rank: the step time and its phases (percentiles, a down-sampled series), and the evaluations' time
HARNESS_STEP_PHASES = "harness_step_phases"
HARNESS_TEACHER_BEST_AUC = "harness_teacher_best_auc"
HARNESS_TRACE = "harness_trace"

#: MLPerf's names above that ``mlperf_logging.mllog.constants`` does not have.
NOT_IN_MLPERF_CONSTANTS = frozenset({"DATA_PARALLELISM", "EVAL_ERROR", "TRACKED_STATS", "TRAIN_STEP_TIME", "THROUGHPUT",
                                     "STEP", "REASON"})
HARNESS_KEYS = frozenset(v for k, v in dict(globals()).items() if k.startswith("HARNESS_") and isinstance(v, str))
