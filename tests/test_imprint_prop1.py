"""Proposition 1 (Fowl et al. App. A.1): exact expectations checked against simulations."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from fedleak import FedleakError
from fedleak.attacks.imprint import (
    expected_recovered,
    expected_recovered_paper,
    one_shot_probability,
    simulate_recovered,
)


def test_exact_value_for_the_papers_setting():
    # 64 inputs, 128 equal bins: 64·(127/128)^63, computed in exact arithmetic
    assert expected_recovered(64, 128) == float(64 * Fraction(127, 128) ** 63)
    assert expected_recovered(64, 128) == pytest.approx(39.0469, abs=1e-4)
    assert expected_recovered(1, 5) == 1.0 and expected_recovered(5, 1) == 0.0


@pytest.mark.parametrize("n,k", [(8, 16), (64, 128), (64, 300)])
def test_iid_simulation_agrees_with_the_exact_expectation(n, k):
    counts = simulate_recovered(n, [1.0 / k] * k, trials=20000, seed=1).double()
    sem = float(counts.std()) / 20000 ** 0.5
    assert abs(float(counts.mean()) - expected_recovered(n, k)) < 4 * sem


def test_unequal_and_partial_masses():
    masses = [0.5, 0.25, 0.125]  # 1/8 of the mass in no bin
    exact = sum(10 * p * (1 - p) ** 9 for p in masses)
    assert expected_recovered(10, masses=masses) == pytest.approx(exact)
    counts = simulate_recovered(10, masses, trials=40000, seed=2).double()
    assert abs(float(counts.mean()) - exact) < 4 * float(counts.std()) / 200
    assert expected_recovered(64, masses=[1 / 128] * 128) == pytest.approx(expected_recovered(64, 128))


def _bose_einstein(n: int, k: int, trials: int, seed: int) -> torch.Tensor:
    """Singly-occupied bins when every occupancy pattern (stars and bars) is equally likely."""
    g = torch.Generator().manual_seed(seed)
    bars = torch.rand(trials, n + k - 1, generator=g).argsort(1)[:, : k - 1].sort(1).values
    edges = torch.cat([torch.full((trials, 1), -1), bars, torch.full((trials, 1), n + k - 1)], 1)
    return ((edges.diff(1) - 1) == 1).sum(1).double()


def test_printed_formula_counts_equally_likely_patterns():
    """App. A.1 as printed = Bose–Einstein expectation − n/k; it is not the i.i.d. expectation."""
    n, k = 10, 20
    sim = _bose_einstein(n, k, 100000, seed=0)
    assert abs(float(sim.mean()) - (expected_recovered_paper(n, k) + n / k)) < 4 * float(sim.std()) / 100000 ** 0.5
    assert expected_recovered_paper(n, k, residual=False) == pytest.approx(expected_recovered_paper(n, k) + n / k)
    # Fig. 1(a): "with only 156 bins, an attacker can expect to recover over 50%" of 64 — the printed formula;
    # for i.i.d. inputs the expectation is higher
    assert expected_recovered_paper(64, 156) / 64 == pytest.approx(0.50, abs=0.005)
    assert expected_recovered(64, 156) / 64 == pytest.approx(0.667, abs=0.001)


def test_one_shot_probability():
    n = 4096
    assert one_shot_probability(n, [1 / n]) == pytest.approx(n * (1 / n) * (1 - 1 / n) ** (n - 1))
    two = one_shot_probability(n, [1 / n, 1 / n])
    assert two == pytest.approx(0.6005, abs=1e-3)  # ≈ 2/e − 1/e²
    counts = simulate_recovered(200, [1 / 200, 1 / 200], trials=40000, seed=3)
    rate = float((counts > 0).double().mean())
    assert abs(rate - one_shot_probability(200, [1 / 200, 1 / 200])) < 0.01


def test_errors():
    for bad in (lambda: expected_recovered(0, 4), lambda: expected_recovered(4, 0),
                lambda: expected_recovered(4, 2, masses=[0.5]), lambda: expected_recovered(4, masses=[0.7, 0.7]),
                lambda: expected_recovered(4, masses=[-0.1]), lambda: expected_recovered_paper(10, 10),
                lambda: one_shot_probability(10, [0.01] * 21), lambda: simulate_recovered(True, [0.5])):
        with pytest.raises(FedleakError):
            bad()
