"""The bytes a sharding plan puts on each link class per training step, and their time.

:func:`project_traffic` follows the executor's collectives
(:mod:`harness.reference.distributed.sharded`, :mod:`harness.reference.distributed.comm`)
message by message: for every kind of collective, the bytes every rank sends to every other
rank, split into those that stay inside a node (``intra_node``) and those that cross nodes
(``inter_node``), summed over the ranks, for one training step of the global batch. A run logs
this projection beside what its collectives counted (``harness_comm_projection``,
``harness_comm_stats``), so the model the planner prices and the traffic the run makes can
be compared.

Pooled tables send a vector per sample (a row shard's partial sums); sequence tables
(``TableSpec.sequence``) send jagged sequences: a vector per id, each from the shard whose rows
hold it, ``pooling`` ids a sample (the lengths travel once, in the input all-to-all, so the
forward and backward all-to-alls carry the values alone); their backward returns a gradient per
vector. Both stages of table-row-wise and table-column-wise tables over several nodes follow the
same rule: stage one gathers, inside the node, each shard's vectors for the samples of one local
index of every node; stage two sends every sample's whole output (a pooled vector, or its
sequence of ``pooling`` vectors, each as the shard that holds its id encoded it) to its node. A
sequence table's stage one is preceded by its shards' counts of the ids they hold of each local
index's samples, per node (one int64 each, with the input all-to-all's bytes).

What is exact and what is expected: every pooled-embedding all-to-all (flat, and both stages
of table-row-wise and table-column-wise tables over several nodes), every sequence table's
whose shards hold every row, the lengths of the input
distribution, the ids of tables whose shards all hold every row (table-wise, column-wise,
table-column-wise) or whose row shards all lie in one node (table-row-wise: every id of a
remote sample crosses, once), the sums over the ranks of the dense and data-parallel
all-reduces with fp32, fp16 or bf16 (their chunks are whole values, so DDP's buckets do not
change the total) and the gathered replicas of 16-bit tables are exact for batches whose samples
all have the tables' pooling (a sequence table's: whose samples of each rank have, on average,
``pooling`` events; its gathered replicas are an expectation). The ids and the
sequence vectors of row-wise shards spread over ranks, and the fp8/int8 all-reduce's padding to whole rows of
256 values in each of DDP's buckets, are expectations (uniform ids; one bucket); ``exact``
says which kinds' inter-node figures are exact for the plan.

Data-parallel replicas move what :mod:`harness.reference.distributed.replicas` moves: fp32 tables
all-reduce their gradients (a dense tensor of every replica's values, in the all-reduce codec);
tables stored in fewer bytes (bf16, fp16: ``table_bytes`` under 4, by default the plan's
``param_bytes_per_element``) are gathered instead, so that every rank sums the global batch's
gradients in one process's order: each rank sends every other rank its samples' ids (int64, each
table's ``pooling`` a sample) and their pooled gradients (one row per sample and dimension, a
vector per table, in the backward codec), per group of tables of one dimension. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.reference.planner.codecs import ROW_OVERHEAD, Codec, CommConfig, wire_bytes  # noqa: F401  (re-exported)
from harness.reference.planner.types import Plan, Shard, ShardingType, TableSpec

INPUT, FORWARD, BACKWARD, DENSE, REPLICA = (
    "input_all_to_all", "forward_all_to_all", "backward_all_to_all", "dense_all_reduce", "replica_all_reduce")
KINDS = (INPUT, FORWARD, BACKWARD, DENSE, REPLICA)
INTRA, INTER = "intra_node", "inter_node"
ID_BYTES = 8  # ids and lengths travel as int64
ALL_REDUCE_ROW = 256  # values per row of a scaled codec in the all-reduce
TWO_STAGE = (ShardingType.TABLE_ROW_WISE, ShardingType.TABLE_COLUMN_WISE)


def project_traffic(plan: Plan, *, ranks_per_node: int, codecs: CommConfig,
                    dense_values: int, intra_bw_bytes_per_s: float = 0.0,
                    scale_out_bw_bytes_per_s: float = 0.0, table_bytes: int | None = None) -> dict[str, Any]:
    """Bytes per link class and kind of one training step of ``plan`` (the planner's
    :class:`~harness.reference.planner.types.Plan`), over every rank, and the seconds of the
    busiest rank at the given one-way link bandwidths; ``codecs``: what each collective sends.

    ``dense_values``: the dense part's parameter count (DDP all-reduces their gradients).
    ``table_bytes``: the bytes of a stored table value (4: fp32; 2: bf16 or fp16, whose replicas
    are gathered, not all-reduced); None: the plan's (:func:`table_value_bytes`).
    """
    if not isinstance(plan, Plan):
        raise HarnessError(f"project_traffic takes the planner's Plan (Plan.from_dict reads its JSON), "
                           f"not {type(plan).__name__}", ErrorCategory.BAD_INPUT)
    if not isinstance(codecs, CommConfig):
        raise HarnessError(f"project_traffic takes the codecs as a CommConfig (CommConfig.from_names reads "
                           f"their names), not {type(codecs).__name__}", ErrorCategory.BAD_INPUT)
    w = int(plan.world_size)
    per_node = ranks_per_node if w % ranks_per_node == 0 else w
    nodes = w // per_node
    b = int(plan.batch_size) // w
    fwd, bwd, red = codecs.forward, codecs.backward, codecs.allreduce
    two_stage_on = nodes > 1 and per_node > 1

    def node(r: int) -> int:
        return r // per_node

    sent = {kind: {INTRA: 0.0, INTER: 0.0} for kind in KINDS}
    by_rank = [{INTRA: 0.0, INTER: 0.0} for _ in range(w)]

    def send(kind: str, src: int, dst: int, nbytes: float) -> None:
        if src == dst or not nbytes:
            return
        link = INTRA if node(src) == node(dst) else INTER
        sent[kind][link] += nbytes
        by_rank[src][link] += nbytes

    flat: list[list[Shard]] = [[] for _ in range(w)]
    hier: list[list[Shard]] = [[] for _ in range(w)]
    keys: list[set[tuple[int, int, int]]] = [set() for _ in range(w)]
    tables = plan.tables
    by_name = {table.name: table for table in tables}
    node_tables: list[list[int]] = [[] for _ in range(nodes)]
    replica_values = 0
    replicas: dict[tuple[int, bool], list[TableSpec]] = {}  # (dim, sequence) -> data-parallel tables
    shards_of = plan.table_shards()
    exact_ids = exact_vectors = True
    for t, (table, sharding, shards) in enumerate(zip(tables, plan.sharding_types, plan.table_shards())):
        if sharding is ShardingType.DATA_PARALLEL:
            replica_values += int(table.rows) * int(table.dim)
            replicas.setdefault((int(table.dim), table.sequence), []).append(table)
            continue
        two_stage = two_stage_on and sharding in TWO_STAGE
        partial_nodes = set()
        for s in shards:
            r = int(s.rank)
            (hier if two_stage else flat)[r].append(s)
            keys[r].add((t, int(s.row_offset), int(s.rows)))
            if int(s.rows) != int(table.rows):
                partial_nodes.add(node(r))
                exact_vectors &= two_stage or not table.sequence
        if two_stage:
            node_tables[node(int(shards[0].rank))].append(t)
        exact_ids &= len(partial_nodes) <= 1

    def vectors(s: Shard, samples: int) -> float:
        """Vectors shard ``s`` sends for ``samples`` samples: one each (pooled), or one per id in its rows."""
        table = by_name[s.table]
        return samples * table.pooling * int(s.rows) / int(table.rows) if table.sequence else samples

    def stage_two(codec: Codec, t: int) -> float:
        """Bytes of the outputs of two-stage table ``t`` for one rank's ``b`` samples: a pooled
        vector each (summed in stage one), or a sequence table's vectors, shard by shard."""
        if not tables[t].sequence:
            return wire_bytes(codec, b, int(tables[t].dim))
        return sum(wire_bytes(codec, vectors(s, b), int(s.cols)) for s in shards_of[t])

    for src in range(w):
        for dst in range(w):
            # input: lengths of every key of dst, then the ids of src's samples in each key's rows
            send(INPUT, src, dst, len(keys[dst]) * b * ID_BYTES)
            send(INPUT, src, dst, sum(b * tables[t].pooling * rows / tables[t].rows
                                      for t, _, rows in keys[dst]) * ID_BYTES)
            # flat: src's shards' vectors of dst's samples (pooled, or jagged sequences), and back
            send(FORWARD, src, dst, sum(wire_bytes(fwd, vectors(s, b), int(s.cols)) for s in flat[src]))
            send(BACKWARD, src, dst, sum(wire_bytes(bwd, vectors(s, b), int(s.cols)) for s in flat[dst]))
            if not two_stage_on or not any(node_tables):
                continue
            if node(src) == node(dst):  # stage one: the samples of dst's local index, nodes times b
                # (a sequence table's shards first say how many ids each holds of them, per node)
                send(INPUT, src, dst, sum(nodes * ID_BYTES for s in hier[src] if by_name[s.table].sequence))
                send(FORWARD, src, dst, sum(wire_bytes(fwd, vectors(s, nodes * b), int(s.cols)) for s in hier[src]))
                send(BACKWARD, src, dst, sum(wire_bytes(bwd, vectors(s, nodes * b), int(s.cols)) for s in hier[dst]))
            elif src % per_node == dst % per_node:  # stage two: one local index, across nodes
                # (a pooled table's finished vectors; a sequence table's, each as its shard encoded it)
                send(FORWARD, src, dst, sum(stage_two(fwd, t) for t in node_tables[node(src)]))
                send(BACKWARD, src, dst, sum(stage_two(bwd, t) for t in node_tables[node(dst)]))

    gathered = (table_value_bytes(plan) if table_bytes is None else table_bytes) < 4
    if gathered:  # 16-bit replicas: every rank's ids and pooled gradients to every other rank
        message = sum(_gathered_bytes(group, b, bwd) for group in replicas.values())
        for src in range(w):
            for dst in range(w):
                send(REPLICA, src, dst, message)
    # the all-reduces: reduce-scatter then all-gather of chunks; over the ranks, each chunk goes
    # to every other rank once in each stage
    for kind, values in ((DENSE, dense_values), (REPLICA, 0 if gathered else replica_values)):
        if not values or w == 1:
            continue
        width = ALL_REDUCE_ROW if red in ROW_OVERHEAD else 1
        total = wire_bytes(red, -(-values // width), width)
        for link, others in ((INTRA, per_node - 1), (INTER, w - per_node)):
            sent[kind][link] += 2 * others * total
            for r in range(w):
                by_rank[r][link] += 2 * others * total / w

    def seconds(r: int) -> float:
        intra = by_rank[r][INTRA] / intra_bw_bytes_per_s if intra_bw_bytes_per_s > 0 else 0.0
        inter = by_rank[r][INTER] / scale_out_bw_bytes_per_s if scale_out_bw_bytes_per_s > 0 else 0.0
        return intra + inter

    busiest = max(range(w), key=seconds)
    return {
        "nodes": nodes, "ranks_per_node": per_node, "batch_per_rank": b,
        "per_step": {kind: {f"{INTRA}_bytes": round(v[INTRA], 3), f"{INTER}_bytes": round(v[INTER], 3)}
                     for kind, v in sent.items()},
        "exact_inter_node": {INPUT: exact_ids, FORWARD: exact_vectors, BACKWARD: exact_vectors,
                             DENSE: red not in ROW_OVERHEAD,
                             REPLICA: not any(seq for _, seq in replicas) if gathered else red not in ROW_OVERHEAD},
        "seconds_per_step": round(seconds(busiest), 9), "busiest_rank": busiest,
        "link_bytes_per_s": {INTRA: intra_bw_bytes_per_s, INTER: scale_out_bw_bytes_per_s},
    }


def table_value_bytes(plan: Plan) -> int:
    """The bytes of one stored table value the plan was made for: its planner config's
    ``param_bytes_per_element`` (a run plans with its precision's), else fp32's 4."""
    value = plan.config.get("param_bytes_per_element", 4)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 4


def _gathered_bytes(group: Sequence[TableSpec], batch: int, codec: Codec) -> float:
    """What a rank sends each other rank for one group of 16-bit replicas of one dimension
    (``Replicas._gathered``): per row, the group's ids (int64) and its pooled gradients as one
    codec row (a vector per table). A row is a sample (pooling ids of each table), or a sequence
    table's event (one id of each; ``pooling`` events a sample, on average)."""
    dim = int(group[0].dim)
    if group[0].sequence:
        rows, width = batch * max(float(t.pooling) for t in group), float(len(group))
    else:
        rows, width = float(batch), sum(float(t.pooling) for t in group)
    return rows * width * ID_BYTES + wire_bytes(codec, rows, len(group) * dim)


def measured_per_step(total: Mapping[str, Mapping[str, float]], steps: int, input_batches: int, ranks: int,
                      kinds: Sequence[str] = KINDS) -> dict[str, dict[str, float]]:
    """A run's counted bytes (``harness_comm_stats``'s ``total``, summed over the ranks) per
    training step (the input distribution's per batch distributed), in :func:`project_traffic`'s
    shape, with the seconds a rank waited in them per step (the mean over the ranks)."""
    out = {}
    for kind in kinds:
        n = max(input_batches if kind == INPUT else steps, 1)
        out[kind] = {**{f"{link}_bytes": round(total[kind][f"{link}_bytes"] / n, 3) for link in (INTRA, INTER)},
                     "seconds": round(total[kind]["seconds"] / n / max(ranks, 1), 9)}
    return out
