"""The training engine: the session (the one training loop), the MLPerf trainer around it, the
worker process, LR schedules, the run's MLLOG writer and its config."""
