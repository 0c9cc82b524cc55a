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

from ... import attacks
from ...attacks.base import ATTACKS, ensure_loaded
from ...errors import FedleakError, unknown_choice

HONEST = "honest-but-curious"
MALICIOUS = "malicious"
THREAT_MODELS = {
    HONEST: "the server follows the protocol and reconstructs data from the updates it receives",
    MALICIOUS: "the server ships a modified model (an imprint block) to the clients and reads their inputs back",
}
#: the malicious server's attacks (``--attacks`` may name them; the rest of ``--attacks`` are honest)
MALICIOUS_NAMES = ("imprint", "imprint-sparse", "imprint-one-shot", "cah", "loki")

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
          "imprint-sparse": "Robbing the Fed sparse imprint", "loki": "LOKI per-client kernels and bins"}


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
    ensure_loaded()
    return option in {f.name for f in dataclasses.fields(ATTACKS[name].cls.Options)}


def choose(name: str, *, quick: bool, iterations: Optional[int], seed: int) -> AttackChoice:
    """The audit's options for attack ``name`` (budget, labels), unknown names rejected."""
    ensure_loaded()
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


@dataclass(frozen=True)
class AttackBudget:
    """What every attack of one audit is chosen with: ``--quick`` (shortened budgets), ``--iterations`` (an
    explicit budget) and the seed."""

    quick: bool = False
    iterations: Optional[int] = None
    seed: int = 0
    scaled: tuple = ()  # (attack, iterations) pairs a time budget set (audit/plan/time_budget.py)

    @classmethod
    def of(cls, config) -> "AttackBudget":
        """The budget of an :class:`~fedleak.audit.AuditConfig`."""
        return cls(bool(config.quick), config.iterations, config.seed)

    def choose(self, name: str) -> AttackChoice:
        """:func:`choose` at this budget (an attack a time budget shortened at its shortened iterations)."""
        choice = choose(name, quick=self.quick, iterations=self.iterations, seed=self.seed)
        shortened = dict(self.scaled).get(name)
        if shortened is None:
            return choice
        key = "steps" if name in TEXT_BUDGETS and "steps" in choice.options else "iterations"
        return dataclasses.replace(choice, options={**choice.options, key: shortened})


def honest_attacks(algorithm: str, budget: AttackBudget, modality, *, override=None) -> list[AttackChoice]:
    """The honest server's attacks on ``algorithm`` (those of ``override`` when given, else the ``modality``'s:
    :meth:`fedleak.modality.Modality.honest_attacks`), at ``budget``."""
    names = list(override) if override else modality.honest_attacks(algorithm)
    return [budget.choose(n) for n in names]


def honest_override(attacks) -> list[str]:
    """The honest attacks ``--attacks`` names (the malicious ones removed)."""
    return [a for a in (attacks or ()) if a not in MALICIOUS_NAMES]


def build(choice: AttackChoice):
    return attacks.build(choice.name, **choice.options)


#: honest server's attacks on text (token sequences), per algorithm: DAGER (Petrov et al. 2024) and its
#: continuous variant TIGER; those registered in :mod:`fedleak.attacks` are run
TEXT_HONEST_ATTACKS = {"fedsgd": ("dager", "tiger"), "fedavg": ("dager", "tiger")}
#: (standard, quick) optimization steps of the continuous text attacks
TEXT_BUDGETS = {"tiger": (200, 50), "tag": (100, 30)}
TITLES.update({"dager": "DAGER (span-based recovery)", "tiger": "TIGER (continuous span-based recovery)",
               "tag": "TAG (gradient matching on relaxed tokens)"})


def text_attacks(algorithm: str) -> list[str]:
    """The registered text attacks of :data:`TEXT_HONEST_ATTACKS` for ``algorithm`` (an error if none is)."""
    ensure_loaded()
    names = [n for n in TEXT_HONEST_ATTACKS[algorithm] if n in ATTACKS]
    if not names:
        raise FedleakError(f"no text attack ({', '.join(TEXT_HONEST_ATTACKS[algorithm])}) is registered in this "
                           f"installation; name one with --attacks")
    return names


# -- exact attacks (issues 20, 27) ---------------------------------------------------------------
#: exact attacks the audit adds by itself where their precondition can hold
EXACT_ATTACKS = ("analytic-fc", "spear")
#: text attacks whose recoveries are verified by recomputing the update (certain when they verify)
TEXT_EXACT_ATTACKS = ("dager",)
#: titles name the method only: whether a result is exact or verified is said by its evidence, never by a title
TITLES.update({"spear": "SPEAR", "analytic-fc": "row/bias ratio (Phong et al.)"})


def kind(name: str) -> str:
    """``exact`` (recovery verified by recomputing the update), ``optimization`` (it has an iteration or step
    budget) or ``analytic`` (a closed-form readout, e.g. an imprint block, scored but not verified)."""
    if name in EXACT_ATTACKS or name in TEXT_EXACT_ATTACKS:
        return "exact"
    if _accepts(name, "iterations") or _accepts(name, "steps"):
        return "optimization"
    return "analytic"


def budget_of(choice: AttackChoice) -> tuple:
    """``(budget, unit, default budget)`` of an optimization attack as it runs (``None``s otherwise)."""
    if choice.name in TEXT_BUDGETS and "steps" in choice.options:
        return choice.options["steps"], "steps", TEXT_BUDGETS[choice.name][0]
    if "iterations" in choice.options:
        return choice.options["iterations"], "iterations", BUDGETS.get(_family(choice.name), DEFAULT_BUDGET)[0]
    return None, None, None


def exact_applicable(model, protocol, samples: int) -> Optional[str]:
    """Why no exact image attack applies (``None`` when one can): the first layer must be linear with a bias
    (``--model mlp``) and the update one gradient step (FedSGD, or FedAvg with a single step)."""
    from torch import nn

    from ...types.params import layers

    found = layers(model)
    module = model.get_submodule(found[0].module) if found else None
    if not isinstance(module, nn.Linear) or module.bias is None:
        return "the model's first layer is not a linear layer with a bias"
    if protocol.num_steps(samples) != 1:
        return f"{protocol.num_steps(samples)} local steps (exact attacks need one gradient step)"
    return None


def transformer(model) -> bool:
    """Whether DAGER can probe the model (a Hugging Face transformer, possibly with LoRA adapters)."""
    return getattr(model, "hf", None) is not None or hasattr(model, "base") and getattr(model.base, "hf", None) is not None


def exact_attacks(names, *, seed: int = 0) -> list[AttackChoice]:
    """The exact attacks ``names`` (a modality's :meth:`~fedleak.modality.Modality.required_exact`: the audit runs
    them whatever ``--attacks`` says, and ``low`` needs each to have run), with the audit's options."""
    return [choose(n, quick=False, iterations=None, seed=seed) for n in names]
