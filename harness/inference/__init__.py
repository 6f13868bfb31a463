"""``harness infer`` as MLPerf Inference runs it: the official settings (``mlperf.conf``, a
byte-identical copy of the one compiled into the installed LoadGen) apart from the
submitter's ``user.conf``, AccuracyOnly runs scored as MLPerf's DLRMv2 accuracy script
scores them, the results layout of a submission, and the Software Defined Memory
measurements (row-sized storage reads counted per query, an added per-read device latency).

Modules, one role each: :mod:`~harness.inference.config` (what the command runs: scenarios,
variants, settings; torch-free), :mod:`~harness.inference.model` (the model trained once and kept,
built with its tables in memory or on the SSD tier), :mod:`~harness.inference.qsl` (LoadGen's
query sample library: a sample is a user), :mod:`~harness.inference.calibration` (how fast each
variant answers, before its runs), :mod:`~harness.inference.results` (what was measured, as values),
:mod:`~harness.inference.pipeline` (the command's steps, in order; imported by the command only),
:mod:`~harness.inference.worker` (one LoadGen test in its own process),
:mod:`~harness.inference.storage` (the rows on the SSD file, read with ``pread``) and
:mod:`~harness.inference.mlperf` (LoadGen, settings, results layout, accuracy).
"""
