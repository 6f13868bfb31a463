"""Run MLPerf's own package checker (mlperf_logging 4.1.68) on many packages, in this process.

Used by the seed tests as a subprocess, so the official package checker runs as it does from its
command line (``python -m mlperf_logging.package_checker FOLDER training RULESET --log_output LOG``,
run from the package's parent folder: logging to LOG, then ``check_training_package``) without
paying an interpreter start and mlperf_logging's imports per package. Reads JSON lines ``{"parent",
"folder", "ruleset", "log"}`` on stdin; writes one JSON line per input: ``{"crash": "<exception
type>" | null}`` (for dlrm, and for a log the RCP checker cannot parse, the checker crashes in its
RCP step, after the seed checker has logged its verdict, as its command line does).
"""

import contextlib
import io
import json
import logging
import os
import sys

from mlperf_logging.compliance_checker import mlp_compliance
from mlperf_logging.package_checker import package_checker
from official_yaml import install

install(mlp_compliance)  # its rule files parsed once, not once per log (official_yaml.py)

root = logging.getLogger()
for line in sys.stdin:
    job = json.loads(line)
    os.chdir(job["parent"])
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(job["log"])  # what logging.basicConfig(filename=...) sets up
    handler.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    crash = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its prints, not this driver's answers
            package_checker.check_training_package(job["folder"], "training", job["ruleset"], False, False, False,
                                                   False, False, job["log"])
    except Exception as err:  # noqa: BLE001 - the official checker crashing is what we record
        crash = type(err).__name__
    finally:
        handler.flush()
        mlp_compliance.enqueued_configs.clear()
    print(json.dumps({"crash": crash}), flush=True)
