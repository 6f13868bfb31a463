"""Run sets: plan a set of runs (the benchmark's required count, seeds, the sharding plan), launch
each (one node, or several launchers that meet at node 0), resume, score and check it.

One module per role:

- :mod:`~harness.runsets.request`: what the user asks (``harness run``'s options) and its own checks;
- :mod:`~harness.runsets.plan`: the request resolved against the benchmark, the profile and this machine;
- :mod:`~harness.runsets.placement`: where the tables live (the tier plan, the sharding plan);
- :mod:`~harness.runsets.location`: where the set goes (the next free root beside a complete set), what is left;
- :mod:`~harness.runsets.manifest`: the set's manifest, what a resume must keep;
- :mod:`~harness.runsets.workers`: one run's worker processes (their config, start, progress, stop);
- :mod:`~harness.runsets.execute`: node 0 runs the pending runs and moves each finished log into place;
- :mod:`~harness.runsets.follow`: a follower node's share of a multi-node set;
- :mod:`~harness.runsets.score`: the set's runs and score, read from their logs;
- :mod:`~harness.runsets.reporter`: what a set tells the user while it works;
- :mod:`~harness.runsets.verdict`: what ``harness check`` says of the set, and ``harness run``'s exit code;
- :mod:`~harness.runsets.launch` and :mod:`~harness.runsets.torchrun`: how a run's ranks are started.

Layout (the MLPerf submission layout, under ``--results``, default ``results/``)::

    <results>/<submitter>/systems/<system>.json
    <results>/<submitter>/results/<system>/<benchmark>/result_<i>.txt
    <results>/.harness/<submitter>/<system>/<benchmark>/     staging: run configs, logs
                                                            being written, interrupted logs,
                                                            runset.json (the set's manifest)

A run's log is written in the staging folder and moved into the results tree with one
``os.replace`` when the run has ended, so the results tree only ever holds finished logs.
An interrupted run's log ends with ``run_stop status=aborted`` and stays in staging as
``result_<i>.interrupted-<time>.txt``; ``--resume`` runs the missing indices of the set.

A tree holds one set per system and benchmark: where ``<results>`` holds a complete one, a new set
goes to the next free root beside it (``<results>-2``, ``<results>-3``, ...), the complete one kept
as it is (:mod:`~harness.runsets.location`).
"""
