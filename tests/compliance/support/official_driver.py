"""Run MLPerf's own compliance checker (mlperf_logging 4.1.68) on many logs, in this process.

Used by the agreement tests as a subprocess, so the official checker runs as it does from
its command line (``python -m mlperf_logging.compliance_checker --usage training --ruleset R
[--config C] FILE``: ``make_checker`` then ``main``, warnings suppressed as with ``--quiet``)
without paying an interpreter start per log. Reads JSON lines ``{"file", "ruleset",
"config"?}`` on stdin; writes one JSON line per input: ``{"verdict": "pass" | "fail" |
"crash", "error": "<exception type>"?}``.
"""

import json
import logging
import sys

from mlperf_logging.compliance_checker import mlp_compliance
from official_yaml import install

install(mlp_compliance)  # its rule files parsed once, not once per log (official_yaml.py)

logging.disable(logging.CRITICAL)

for line in sys.stdin:
    job = json.loads(line)
    ruleset = job["ruleset"]
    checker = mlp_compliance.make_checker("training", ruleset, True, False)
    config = job.get("config") or f"training_{ruleset}/common.yaml"
    try:
        valid = mlp_compliance.main(job["file"], config, checker)[0]
        out = {"verdict": "pass" if valid else "fail"}
    except Exception as err:  # noqa: BLE001 - the official checker crashing is a verdict we record
        mlp_compliance.enqueued_configs.clear()
        out = {"verdict": "crash", "error": type(err).__name__}
    print(json.dumps(out), flush=True)
