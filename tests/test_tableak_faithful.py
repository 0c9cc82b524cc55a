"""TabLeak's restart matching breaks ties as the reference does: its Hungarian cost is (number of wrong columns) /
(number of columns), computed exactly as ``utils/eval_metrics.py`` computes it, so that equal-cost matchings (the
costs are multiples of 1/columns) come out of ``linear_sum_assignment`` identically and the pooled restarts are the
reference's (measured: with 1 − share right, 16 of 30 restarts of a German batch were aligned differently, 56 of
640 pooled cells differed)."""

import math

import torch

from fedleak.data.tabular import load
from fedleak.data.tabular.compare import right_cells, row_cost


def test_the_matching_cost_is_the_references_count_over_columns():
    spec, clients = load("german", num_clients=2, samples_per_client=8, seed=2)
    schema = spec.schema
    guess, truth = clients[0].inputs.reshape(8, -1), clients[1].inputs.reshape(8, -1)
    cost = row_cost(schema, guess, truth)
    wrong = (~right_cells(schema, guess, truth)).sum(dim=2)
    columns = len(schema.columns)
    expected = torch.tensor([[int(w) / columns for w in row] for row in wrong], dtype=torch.float64)
    assert torch.equal(cost, expected)  # bit for bit: Python's (cat_score + cont_score) / (num_cats + num_conts)
    assert 1 - 17 / 20 != 3 / 20  # why 1 − share right would break ties differently


def test_projection_rounds_halves_up_as_the_reference():
    """The reference decodes a continuous value as floor(x + 0.5) (utils/encoder_decoder.py); torch rounds 2.5 to 2."""
    from fedleak.attacks.tabular.tableak import _project

    spec, _ = load("german", num_clients=2, samples_per_client=2, seed=2)
    schema = spec.schema
    column, where = next((c, w) for c, w in schema.blocks() if c.kind == "continuous" and c.integer)
    raw = torch.zeros(2, schema.width, dtype=torch.float64)
    raw[:, where.start] = torch.tensor([column.low + 1.5, column.low + 2.5], dtype=torch.float64)
    assert _project(schema, raw)[:, where.start].tolist() == [column.low + 2, column.low + 3]


def test_continuous_entropy_uses_the_references_spread_over_restarts():
    """utils/entropy.py: ½ + ½·log(2πσ²) with σ from ``pooled_ensemble``'s torch ``std`` (n − 1) over restarts."""
    import math

    from fedleak.attacks.tabular.tableak import _pool

    spec, _ = load("german", num_clients=2, samples_per_client=2, seed=2)
    schema = spec.schema
    aligned = torch.randn(5, 3, schema.width, generator=torch.Generator().manual_seed(0))
    _, entropy = _pool(schema, aligned, softmax=True)
    j, (column, where) = next((j, cw) for j, cw in enumerate(schema.blocks()) if cw[0].kind == "continuous")
    sigma = aligned[:, :, where.start].double().std(0)
    assert torch.allclose(entropy[:, j], 0.5 + 0.5 * torch.log(2 * math.pi * sigma ** 2), atol=1e-6)


def test_fedavg_pools_probabilities_once_whatever_the_epochs():
    """The reference's FedAvg pools each restart's epoch-averaged probabilities (``soft_avg+softmax``, one epoch
    included) by their median: a one-epoch restart's logits are softmaxed once before the median, and restarts
    that are already averaged probabilities are neither softmaxed again for the median nor for the entropy."""
    from fedleak.attacks.tabular.tableak import _pool, _softmaxed

    spec, _ = load("german", num_clients=2, samples_per_client=2, seed=2)
    schema = spec.schema
    logits = torch.randn(5, 3, schema.width, generator=torch.Generator().manual_seed(1)) * 3
    block = schema.categorical_blocks()[0]
    one_epoch, _ = _pool(schema, logits, softmax=True)
    expected = _softmaxed(schema, logits).median(dim=0).values[:, block].argmax(-1)
    assert torch.equal(one_epoch[:, block].argmax(-1), expected)
    averaged = schema.standardize(_softmaxed(schema, logits))  # what _epoch_average hands over for E > 1
    _, once = _pool(schema, averaged, softmax=True, averaged=True)
    _, twice = _pool(schema, averaged, softmax=True)  # the old path: softmaxed again, flattened towards uniform
    j = next(j for j, (column, _) in enumerate(schema.blocks()) if column.kind == "categorical")
    assert (once[:, j] < twice[:, j]).all()
    p = _softmaxed(schema, logits).mean(0)[:, block].double()
    p = p / p.sum(-1, keepdim=True)
    assert torch.allclose(once[:, j], -(p * torch.log(p + 1e-7)).sum(-1) / math.log(max(block.stop - block.start, 2)),
                          atol=1e-5)
