"""Run sets: plan a set of runs (the benchmark's required count, seeds, the sharding plan), launch
each (one node, or several launchers that meet at node 0), resume, score and check it."""
