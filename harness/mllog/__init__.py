"""The MLLOG format, one layer above the schemas: the key names (:mod:`~harness.mllog.keys`) and
the one reader of MLLOG files (:mod:`~harness.mllog.reader`). Torch-free; used by the checker, the
scorers, the leaderboard and the harness's own readers of its logs alike."""
