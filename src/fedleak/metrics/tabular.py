"""Metrics of record reconstruction, as TabLeak and tabular-GIA define them (research notes §3).

* **accuracy**: reconstructed rows matched one-to-one to the true rows by the Hungarian algorithm on the share
  of wrong cells (optimistic, as the reference); a categorical cell is right iff equal, a continuous one iff
  within 0.319·σ of the column (:mod:`fedleak.data.tabular.compare`); accuracy = share of right cells, every
  column counted once; categorical-only and continuous-only versions over their own cells;
* **exact-match rate** (EMR, tabular-GIA): share of rows with every cell right; EMR_90: rows ≥ 90 % right;
* **per-column accuracy** (which attributes leak most);
* **baselines beside every figure**: ``random`` — categories uniform over the column's categories, continuous
  values uniform in the column's [min, max] (rounded for whole-number columns), matched the same way, averaged
  over draws (tabular-GIA's random baseline); ``prior`` — every row the dataset's most frequent category and
  mean value (the marginal prior; no matching needed as every row is the same);
* **entropy-selected subsets** (TabLeak Table 4): within a batch the cells ranked by the attack's per-cell
  entropy, separately for categorical and continuous cells; accuracy of the 25 % lowest-entropy cells (the
  confident ones) and of the 25 % highest.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..data.tabular.compare import hungarian, right_cells
from ..data.tabular.schema import TabularSchema


def matched_cells(schema: TabularSchema, guess: torch.Tensor, truth: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """(n_truth, columns) right cells of the best one-to-one matching, and for each true row its guess row
    (−1 where the guess has fewer rows)."""
    cells = right_cells(schema, guess, truth)
    rows, cols = hungarian(1.0 - cells.double().mean(dim=2))
    out = torch.zeros(truth.shape[0], len(schema.columns), dtype=torch.bool)
    which = [-1] * truth.shape[0]
    for r, c in zip(rows, cols):
        out[c] = cells[r, c].cpu()
        which[c] = r
    return out, which


def _shares(schema: TabularSchema, right: torch.Tensor) -> dict:
    kinds = [c.kind for c in schema.columns]
    cat = [i for i, k in enumerate(kinds) if k == "categorical"]
    cont = [i for i, k in enumerate(kinds) if k == "continuous"]
    per_row = right.double().mean(dim=1)
    return {"accuracy": float(right.double().mean()),
            "categorical_accuracy": float(right[:, cat].double().mean()) if cat else None,
            "continuous_accuracy": float(right[:, cont].double().mean()) if cont else None,
            "exact_match_rate": float((per_row == 1).double().mean()),
            "emr_90": float((per_row >= 0.9).double().mean())}


def random_guess(schema: TabularSchema, n: int, generator: torch.Generator) -> torch.Tensor:
    raw = torch.zeros(n, schema.width, dtype=torch.float64)
    for column, where in schema.blocks():
        if column.kind == "categorical":
            pick = torch.randint(column.width, (n,), generator=generator)
            raw[torch.arange(n), where.start + pick] = 1.0
        else:
            value = column.low + (column.high - column.low) * torch.rand(n, generator=generator, dtype=torch.float64)
            raw[:, where.start] = value.round() if column.integer else value
    return schema.standardize(raw)


def prior_guess(schema: TabularSchema, n: int) -> torch.Tensor:
    """Every row the most frequent category (the one-hot entries' means are the frequencies) and the mean."""
    raw = torch.zeros(n, schema.width, dtype=torch.float64)
    mean = torch.tensor(schema.entry_mean, dtype=torch.float64)
    for column, where in schema.blocks():
        if column.kind == "categorical":
            raw[:, where.start + int(mean[where].argmax())] = 1.0
        else:
            raw[:, where.start] = round(column.mean) if column.integer else column.mean
    return schema.standardize(raw)


def entropy_subsets(schema: TabularSchema, right: torch.Tensor, entropy: torch.Tensor, which: list[int],
                    share: float = 0.25) -> dict:
    """Accuracy of the ``share`` lowest- and highest-entropy cells, per kind (entropy in the guess's row order)."""
    out = {}
    index = torch.tensor([w if w >= 0 else 0 for w in which])
    ent = entropy[index]  # in the true rows' order
    for kind in ("categorical", "continuous"):
        cols = [i for i, c in enumerate(schema.columns) if c.kind == kind]
        if not cols:
            continue
        values, hits = ent[:, cols].reshape(-1), right[:, cols].reshape(-1).double()
        k = max(1, int(round(share * values.numel())))
        order = torch.argsort(values)
        out[f"{kind}_low_entropy_accuracy"] = float(hits[order[:k]].mean())
        out[f"{kind}_high_entropy_accuracy"] = float(hits[order[-k:]].mean())
    return out


def evaluate(schema: TabularSchema, guess: torch.Tensor, truth: torch.Tensor, *,
             entropy: Optional[torch.Tensor] = None, draws: int = 16, seed: int = 0) -> dict:
    """Every figure of the module docstring for one batch; ``cells`` is the (n, columns) right-cell matrix
    in the true rows' order and ``matched`` the guess row of each true row (for the report's record table)."""
    right, which = matched_cells(schema, guess.cpu(), truth.cpu())
    out = _shares(schema, right)
    out["per_column"] = {c.name: float(v) for c, v in zip(schema.columns, right.double().mean(dim=0))}
    generator = torch.Generator().manual_seed(int(seed))
    randoms = [_shares(schema, matched_cells(schema, random_guess(schema, truth.shape[0], generator),
                                             truth.cpu())[0]) for _ in range(draws)]
    out["random"] = {k: sum(r[k] for r in randoms) / draws for k in randoms[0] if randoms[0][k] is not None}
    out["prior"] = {k: v for k, v in _shares(schema, matched_cells(schema, prior_guess(schema, truth.shape[0]),
                                                                   truth.cpu())[0]).items() if v is not None}
    if entropy is not None:
        out.update(entropy_subsets(schema, right, torch.as_tensor(entropy, dtype=torch.float64), which))
    out["cells"] = right.tolist()
    out["matched"] = which
    return out
