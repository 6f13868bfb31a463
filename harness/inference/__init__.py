"""``harness infer`` as MLPerf Inference runs it: the official settings (``mlperf.conf``, a
byte-identical copy of the one compiled into the installed LoadGen) apart from the
submitter's ``user.conf``, AccuracyOnly runs scored as MLPerf's DLRMv2 accuracy script
scores them, the results layout of a submission, and the Software Defined Memory
measurements (row-sized storage reads counted per query, an added per-read device latency).

Modules: :mod:`~harness.inference.run` (the command: the model trained or reused, calibration,
the variants run in each scenario, the report), :mod:`~harness.inference.storage` (the rows on the SSD file, read with ``pread``),
:mod:`~harness.inference.mlperf` (settings, results layout, accuracy),
:mod:`~harness.inference.worker` (one LoadGen test in its own process).
"""
