"""Cell-by-cell comparison of records under a schema: the one notion of a "right" cell (TabLeak's reference,
``utils/eval_metrics.py``; research notes §3) that the attacks' restart matching and the metrics share.

A categorical cell is right iff the categories are equal (the argmax of each one-hot block); a continuous cell
iff |x̂ − x| ≤ 0.319·σ of the raw column, after x̂ is clamped to the column's range and rounded where the column
holds whole numbers. Every column counts once, whatever its one-hot width.
"""

from __future__ import annotations

import torch

from .schema import TabularSchema


def mixed(schema: TabularSchema, encoded: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardized records (N, width) → (category indices (N, #categorical), raw continuous values (N, #continuous))."""
    raw = schema.destandardize(encoded.detach().to(torch.float64).reshape(encoded.shape[0], schema.width))
    cats, conts = [], []
    for column, where in schema.blocks():
        if column.kind == "categorical":
            cats.append(raw[:, where].argmax(dim=1))
        else:
            value = raw[:, where.start].clamp(column.low, column.high)
            conts.append(value.round() if column.integer else value)
    n = encoded.shape[0]
    empty_long, empty = torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, 0, dtype=torch.float64)
    return (torch.stack(cats, 1) if cats else empty_long.to(raw.device),
            torch.stack(conts, 1) if conts else empty.to(raw.device))


def tolerances(schema: TabularSchema, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor([c.tolerance for c in schema.columns if c.kind == "continuous"], dtype=torch.float64,
                        device=like.device)


def column_order(schema: TabularSchema) -> list[int]:
    """Schema column positions in the order :func:`right_cells` returns them (categorical first, then continuous)."""
    cat = [i for i, c in enumerate(schema.columns) if c.kind == "categorical"]
    cont = [i for i, c in enumerate(schema.columns) if c.kind == "continuous"]
    return cat + cont


def right_cells(schema: TabularSchema, guess: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """(n_guess, n_truth, columns) bool: whether record i of ``guess`` gets column c of record j of ``truth``
    right; columns in the schema's order."""
    gc, gx = mixed(schema, guess)
    tc, tx = mixed(schema, truth)
    cat = gc[:, None, :] == tc[None, :, :]
    cont = (gx[:, None, :] - tx[None, :, :]).abs() <= tolerances(schema, gx) + 1e-9
    both = torch.cat([cat, cont], dim=2)
    inverse = torch.argsort(torch.tensor(column_order(schema), device=both.device))
    return both[:, :, inverse]


def row_cost(schema: TabularSchema, guess: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """(n_guess, n_truth) share of wrong columns: the cost the reference's Hungarian matching minimizes, computed
    as the reference computes it — (number wrong) / (number of columns), not 1 − share right, whose last bit
    differs — so that equal-cost matchings (ties, common: the costs are multiples of 1/columns) are broken the same
    way by ``linear_sum_assignment`` and the pooled restarts are the reference's."""
    right = right_cells(schema, guess, truth)
    return (~right).sum(dim=2).double() / right.shape[2]


def hungarian(cost: torch.Tensor) -> tuple[list[int], list[int]]:
    """Optimal one-to-one assignment (rows of ``cost`` to its columns), scipy's ``linear_sum_assignment``."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost.detach().cpu().numpy())
    return rows.tolist(), cols.tolist()
