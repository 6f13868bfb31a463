"""What one training sample costs a DLRM, counted from the benchmark's model: its GEMMs, the
activations its elementwise work streams through memory, and the operations a step launches.

Counted, not fitted: every figure here follows from the architecture (the model section of a
benchmark spec, :class:`harness.rules.specs.ModelSpec`), as the reference builds it
(:mod:`harness.reference.models.dlrm`):

* **GEMMs.** Each linear layer of the bottom MLP (13 dense features in), of the DCNv2 cross
  network (per layer a ``width x rank`` and a ``rank x width`` product, low rank as the reference)
  and of the top MLP is one ``M x K`` by ``K x N`` product per forward pass, ``M`` the samples; the
  dot interaction is a batched ``(F+1) x D`` by ``D x (F+1)`` product per sample. A training step
  computes each forward product once and two more in the backward pass (the input's and the
  weight's gradient): :data:`TRAINING_GEMM_PASSES`.
* **Activations.** The elements each layer writes per sample (a linear layer's output, a DCN layer's
  rank-wide product and its three elementwise results: the product with ``x0``, the residual sum and
  the bias; the interaction's input and output). In training every activation element is written and
  read in the forward pass, read again and its gradient written and read in the backward pass, and
  the nonlinearity reads and writes it once more: :data:`TRAINING_ACTIVATION_PASSES` passes of the
  activation's bytes (two in an eval's forward pass).
* **Operations.** The kernels (GPU) or operator calls (CPU) of one step, counted per layer as the
  reference and TorchRec-style stacks launch them (:data:`OPS_PER_LINEAR` and the others below):
  they set a floor on a step that no bandwidth or FLOP rate lifts.
* **Dense parameters.** What the data-parallel all-reduce sums every step.

The embeddings' own bytes and their all-to-all are the sharding planner's (its plan prices them per
rank and tier); :func:`embedding_lookups` gives the planner's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ErrorCategory, HarnessError
from harness.rules.specs import BenchmarkSpec, Interaction, ModelFamily, ModelSpec

NUM_DENSE = 13  # Criteo's dense features: the bottom MLP's input (harness.reference.data.batches.NUM_DENSE)
TRAINING_GEMM_PASSES = 3  # forward, and the input's and the weights' gradients
TRAINING_ACTIVATION_PASSES = 6  # forward write + read, backward read, gradient write + read, the nonlinearity's
EVAL_ACTIVATION_PASSES = 2  # forward write + read
# operations a step launches, per piece of the model (forward, backward, optimizer together):
# a linear layer: GEMM, bias and activation; two GEMMs, the activation's and the bias's gradients; W's and b's updates
OPS_PER_LINEAR = 8
OPS_PER_DCN_ELEMENTWISE = 5  # a cross layer's product with x0 and residual sum, forward (2) and backward (3)
OPS_INTERACTION = 6  # dot: concat, batched product, pair gather, and back; dcn: the concat and its split
OPS_EMBEDDINGS = 6  # lookup, output all-to-all, its gradient's all-to-all, fused update, the ids' all-to-all, lengths
OPS_LOSS_AND_INPUT = 8  # sigmoid + BCE and their gradient, the batch's copies to the device, the loss's reduction
EVAL_OPS_FRACTION = 1 / 3  # an eval step launches the forward pass's share


@dataclass(frozen=True)
class Gemm:
    """One matrix product per sample: ``k x n`` weights applied to a ``k``-wide input (``count``
    such products per sample: the dot interaction's batched product has one per sample too)."""

    name: str
    k: int
    n: int
    m_per_sample: int = 1  # rows of the product per sample (the dot interaction: F + 1)

    @property
    def flops_per_sample(self) -> float:
        return 2.0 * self.m_per_sample * self.k * self.n


@dataclass(frozen=True)
class Workload:
    """Per-sample work of one model, forward pass (a training step is :data:`TRAINING_GEMM_PASSES`
    of its GEMMs and :data:`TRAINING_ACTIVATION_PASSES` of its activations)."""

    name: str
    gemms: tuple[Gemm, ...]
    activation_elements: int  # elements written per sample in the forward pass
    ops_per_step: int  # operations one training step launches
    dense_parameters: int  # what the data-parallel all-reduce sums
    embedding_output_elements: int  # pooled vectors' elements per sample (the all-to-all's payload)

    @property
    def forward_flops_per_sample(self) -> float:
        return sum(g.flops_per_sample for g in self.gemms)

    @property
    def training_flops_per_sample(self) -> float:
        return TRAINING_GEMM_PASSES * self.forward_flops_per_sample


def _linears(prefix: str, k: int, widths: tuple[int, ...]) -> tuple[list[Gemm], int, int]:
    """The GEMMs of an MLP from ``k`` inputs, its output elements per sample, its parameters."""
    gemms, elements, params = [], 0, 0
    for i, n in enumerate(widths):
        gemms.append(Gemm(f"{prefix}{i}", k, n))
        elements += n
        params += k * n + n
        k = n
    return gemms, elements, params


def dlrm_workload(model: ModelSpec, *, name: str = "dlrm") -> Workload:
    """The per-sample work of a DLRM (dot or DCNv2 interaction) as the reference builds it."""
    dims = model.embedding_dims or (model.embedding_dim,) * len(model.table_rows)
    tables = len(dims)
    bottom, bottom_elements, bottom_params = _linears("bottom", NUM_DENSE, model.bottom_mlp)
    d = model.bottom_mlp[-1]
    embedding_elements = sum(dims)
    if model.interaction is Interaction.DOT:
        f1 = tables + 1
        interaction = [Gemm("interaction", model.embedding_dim, f1, m_per_sample=f1)]
        top_in = d + f1 * tables // 2
        # the concatenated vectors, the (F+1)^2 dots, the chosen pairs and the top MLP's input
        interaction_elements = f1 * model.embedding_dim + f1 * f1 + top_in
        interaction_params, interaction_ops = 0, OPS_INTERACTION
    else:
        width = d + embedding_elements
        interaction, interaction_elements, interaction_params = [], width, 0
        for layer in range(model.dcn_layers):
            interaction += [Gemm(f"dcn{layer}.v", width, model.dcn_rank), Gemm(f"dcn{layer}.w", model.dcn_rank, width)]
            # the rank-wide product, then w's output (with its bias), its product with x0 and the residual sum
            interaction_elements += model.dcn_rank + 3 * width
            interaction_params += 2 * width * model.dcn_rank + width
        top_in = width
        interaction_ops = OPS_INTERACTION + model.dcn_layers * (2 * OPS_PER_LINEAR + OPS_PER_DCN_ELEMENTWISE)
    top, top_elements, top_params = _linears("top", top_in, model.top_mlp)
    linears = len(bottom) + len(top)
    return Workload(
        name=name,
        gemms=tuple(bottom + interaction + top),
        activation_elements=bottom_elements + embedding_elements + interaction_elements + top_elements,
        ops_per_step=linears * OPS_PER_LINEAR + interaction_ops + OPS_EMBEDDINGS + OPS_LOSS_AND_INPUT,
        dense_parameters=bottom_params + interaction_params + top_params,
        embedding_output_elements=embedding_elements,
    )


def benchmark_workload(spec: BenchmarkSpec) -> Workload:
    """The per-sample work of a benchmark's model; an HSTU ranker is refused in one line (not
    modelled yet: its attention's work grows with the sequence length)."""
    if spec.family is not ModelFamily.DLRM:
        raise HarnessError(f"projecting {spec.name} is not implemented: the projection counts the work of DLRMs "
                           f"(dot and DCNv2), not yet of a {spec.family.value} model's attention",
                           ErrorCategory.NOT_IMPLEMENTED)
    return dlrm_workload(spec.model, name=spec.name)
