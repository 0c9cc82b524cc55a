"""Threat models and the attacks that fit them.

* **honest-but-curious** — the server follows the protocol and only looks at what it receives.
  Against a FedSGD gradient: Inverting Gradients (Geiping et al. 2020), label counts inferred from
  the last layer. Against a FedAvg update (weights after several local steps): Dimitrov et al. 2022
  (per-epoch simulation + epoch prior, labels by RecLabels), AGIC (Xu et al. 2022, one-batch
  approximation with layer weights) and AWA (Song et al. 2023, interpolated per-epoch target with
  the paper's Case 4 layer-weight values; ``awa`` with Bayesian optimization is available through
  ``--attacks``).
* **malicious** — the server changes the model it ships: Robbing the Fed's imprint block (Fowl et
  al. 2022), read back analytically (FedSGD: cumulative bins; FedAvg: the sparse block of §4.3).
  Skip it with ``--no-malicious`` when clients verify the architecture they receive.

``--attacks a,b`` replaces the honest server's choice with the named attacks (``fedleak attacks``).
Budgets (optimization steps) are CPU-sized: ``quick`` for a smoke test; ``iterations`` overrides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .. import attacks
from ..attacks.base import ATTACKS, _ensure_loaded
from ..errors import unknown_choice

HONEST = "honest-but-curious"
MALICIOUS = "malicious"
THREAT_MODELS = {
    HONEST: "the server follows the protocol and reconstructs data from the updates it receives",
    MALICIOUS: "the server ships a modified model (an imprint block) to the clients and reads their inputs back",
}

#: honest server's attacks per algorithm
HONEST_ATTACKS = {"fedsgd": ("inverting-gradients",), "fedavg": ("dimitrov", "agic", "awa-no-bo")}
#: (standard, quick) optimization steps per attack family
BUDGETS = {"inverting-gradients": (1500, 150), "dimitrov": (400, 40), "agic": (1000, 100), "awa": (1000, 100)}
DEFAULT_BUDGET = (500, 50)
#: fixed options per attack family in the audit (labels restored from the update)
FIXED = {"inverting-gradients": {"tv": 1e-3}, "dimitrov": {"labels": "reclabels"}}
#: display names
TITLES = {"inverting-gradients": "Inverting Gradients", "dimitrov": "Dimitrov et al. (simulation + epoch prior)",
          "agic": "AGIC", "awa-no-bo": "AWA", "awa": "AWA (Bayesian-optimized weights)",
          "dimitrov-shared": "shared-image simulation (IG's FedAvg attack)", "imprint": "Robbing the Fed imprint",
          "imprint-sparse": "Robbing the Fed sparse imprint"}


@dataclass(frozen=True)
class AttackChoice:
    """One attack the audit runs: registry name, options, display title."""

    name: str
    options: dict
    title: str


def _family(name: str) -> str:
    for family in BUDGETS:
        if name == family or name.startswith(family + "-"):
            return family
    return name


def _accepts(name: str, option: str) -> bool:
    _ensure_loaded()
    return option in {f.name for f in dataclasses.fields(ATTACKS[name].cls.Options)}


def choose(name: str, *, quick: bool, iterations: Optional[int], seed: int) -> AttackChoice:
    """The audit's options for attack ``name`` (budget, labels), unknown names rejected."""
    _ensure_loaded()
    if name not in ATTACKS:
        raise unknown_choice("attack", name, ATTACKS)
    family = _family(name)
    options = {k: v for k, v in FIXED.get(family, {}).items() if _accepts(name, k)}
    standard, short = BUDGETS.get(family, DEFAULT_BUDGET)
    if _accepts(name, "iterations"):
        options["iterations"] = iterations if iterations is not None else (short if quick else standard)
    if _accepts(name, "seed"):
        options["seed"] = seed
    if name in TEXT_BUDGETS and _accepts(name, "steps"):  # the text attacks count optimization steps
        options["steps"] = iterations if iterations is not None else TEXT_BUDGETS[name][1 if quick else 0]
    return AttackChoice(name, options, TITLES.get(name, name))


def honest_attacks(algorithm: str, *, override=None, quick: bool = False, iterations: Optional[int] = None,
                   seed: int = 0, text: bool = False) -> list[AttackChoice]:
    names = list(override) if override else (text_attacks(algorithm) if text else list(HONEST_ATTACKS[algorithm]))
    return [choose(n, quick=quick, iterations=iterations, seed=seed) for n in names]


def build(choice: AttackChoice):
    return attacks.build(choice.name, **choice.options)


#: honest server's attacks on text (token sequences), per algorithm: DAGER (Petrov et al. 2024) and its
#: continuous variant TIGER; those registered in :mod:`fedleak.attacks` are run
TEXT_HONEST_ATTACKS = {"fedsgd": ("dager", "tiger"), "fedavg": ("dager", "tiger")}
#: (standard, quick) optimization steps of the continuous text attacks
TEXT_BUDGETS = {"tiger": (200, 50), "tag": (100, 30)}
TITLES.update({"dager": "DAGER (exact span-based recovery)", "tiger": "TIGER (continuous span-based recovery)",
               "tag": "TAG (gradient matching on relaxed tokens)"})


def text_attacks(algorithm: str) -> list[str]:
    """The registered text attacks of :data:`TEXT_HONEST_ATTACKS` for ``algorithm`` (an error if none is)."""
    from ..errors import FedleakError

    _ensure_loaded()
    names = [n for n in TEXT_HONEST_ATTACKS[algorithm] if n in ATTACKS]
    if not names:
        raise FedleakError(f"no text attack ({', '.join(TEXT_HONEST_ATTACKS[algorithm])}) is registered in this "
                           f"installation; name one with --attacks")
    return names
