"""The differential privacy in force for each reply the audit attacks, as Flower applies it.

Flower's central DP (McMahan et al. 2018, "Learning differentially private recurrent language
models", Alg. 1; Andrew et al. 2021 for adaptive clipping) is a strategy wrapper —
``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping`` — that clips each client's
update to norm C (on the server, or on the client by ``fixedclipping_mod`` /
``adaptiveclipping_mod``) and adds Gaussian noise of standard deviation σ·C/n to the *aggregate*;
local DP (``LocalDpMod``) clips and noises each reply on the client. What an attack on one reply
faces therefore depends on where the audit sits:

* a server-side wrapper *inside* the audit (``LeakageAudit(DP…ServerSide…(FedAvg()))``) clips
  after the audit has read the reply: the audit attacks the unclipped update;
* a server-side wrapper *around* the audit (``DP…ServerSide…(LeakageAudit(FedAvg()))``) clips first;
* client-side clipping and ``LocalDpMod`` act before the reply leaves the client, whatever the nesting;
* central noise is added to the aggregate only, so every reply is attacked before it.

:func:`wrappers` finds the wrappers on both sides of the audit (inside by following ``.strategy``,
around by the calling frames of ``configure_train``), :func:`describe` records σ, C, fixed or
adaptive and the position, :func:`sees` says what the attacked reply had been through, and
:func:`epsilon` reads Flower's own accountant (``RdpAccountant``, needs ``dp-accounting``): ε after
the round's release at the accountant's δ.
"""

from __future__ import annotations

import sys
from typing import Optional

from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                     DifferentialPrivacyClientSideFixedClipping,
                                     DifferentialPrivacyServerSideAdaptiveClipping,
                                     DifferentialPrivacyServerSideFixedClipping)

#: wrapper class → (where the update is clipped, fixed or adaptive clipping)
WRAPPERS = {DifferentialPrivacyServerSideFixedClipping: ("server", "fixed"),
            DifferentialPrivacyServerSideAdaptiveClipping: ("server", "adaptive"),
            DifferentialPrivacyClientSideFixedClipping: ("client", "fixed"),
            DifferentialPrivacyClientSideAdaptiveClipping: ("client", "adaptive")}


def is_wrapper(obj) -> bool:
    return isinstance(obj, tuple(WRAPPERS))


def _wraps(outer, target, depth: int = 16) -> bool:
    node = getattr(outer, "strategy", None)
    for _ in range(depth):
        if node is target:
            return True
        node = getattr(node, "strategy", None)
    return False


def wrappers(audit, depth: int = 24) -> list[tuple[object, str]]:
    """``[(wrapper, "around" | "inside")]``: the DP wrappers around the audit (found among the
    frames calling it) and inside it (its ``.strategy`` chain)."""
    found, seen = [], set()
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        obj = frame.f_locals.get("self")
        if is_wrapper(obj) and id(obj) not in seen and _wraps(obj, audit):
            found.append((obj, "around"))
            seen.add(id(obj))
        frame = frame.f_back
    node = audit.strategy
    for _ in range(16):
        if node is None:
            break
        if is_wrapper(node) and id(node) not in seen:
            found.append((node, "inside"))
            seen.add(id(node))
        node = getattr(node, "strategy", None)
    return found


def describe(wrapper, position: str) -> dict:
    """σ, C (this round's, for adaptive clipping), fixed/adaptive, where it clips, where it sits."""
    where, clipping = next(v for k, v in WRAPPERS.items() if isinstance(wrapper, k))
    return {"mechanism": type(wrapper).__name__, "where": where, "clipping": clipping,
            "noise_multiplier": float(wrapper.noise_multiplier), "clipping_norm": float(wrapper.clipping_norm),
            "num_sampled_clients": int(wrapper.num_sampled_clients), "noise": "central (on the aggregate)",
            "position": f"{position} the audit", "accountant": getattr(wrapper, "accountant", None) is not None}


def sees(mechanisms: list[dict]) -> dict:
    """Whether the attacked reply had been clipped and noised (``before``/``after``; ``none`` without DP)."""
    clipped = any(m["where"] == "client" or m.get("position") == "around the audit" for m in mechanisms)
    noised = any(m.get("noise") == "local" for m in mechanisms)
    central = any(m.get("noise", "").startswith("central") for m in mechanisms)
    return {"clipping": "after" if clipped else ("before" if mechanisms else "none"),
            "noise": "after (local noise)" if noised else ("before (central noise is on the aggregate)"
                                                           if central else "none")}


def epsilon(wrapper, position: str, sample_size: int, own=None) -> Optional[dict]:
    """Flower's accountant's ε after this round's release (``None`` without an accountant).

    Inside the audit the wrapper has composed the round when its ``aggregate_train`` returned;
    around it, it composes after the audit returns, so the audit composes the same
    ``GaussianPrivacyEvent`` on a copy of the wrapper's accountant (same class, same state).
    Flower's fixed-clipping wrappers refuse an accountant around anything but a plain ``FedAvg``
    (so not around the audit): ``own`` is then a Flower accountant the audit composes itself, one
    ``GaussianPrivacyEvent`` of the wrapper's σ per released round."""
    accountant = getattr(wrapper, "accountant", None)
    if accountant is None and own is not None and WRAPPERS[type(wrapper)][1] == "fixed":
        from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

        if sample_size > 0:
            own.compose(GaussianPrivacyEvent(noise_multiplier=float(wrapper.noise_multiplier), sample_size=sample_size,
                                             population_size=own.config.population_size))
        spent = own.get_privacy_spent()
        return {"epsilon": float(spent.epsilon), "delta": float(spent.delta), "releases": int(spent.num_releases),
                "accountant": f"flower {type(own).__name__} (composed by fedleak for the wrapper around it)"}
    if accountant is None:
        return None
    if position == "around" and sample_size > 0:
        from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

        copy = type(accountant)(accountant.config)
        copy.load_state_dict(accountant.state_dict())
        copy.compose(GaussianPrivacyEvent(noise_multiplier=float(wrapper.noise_multiplier), sample_size=sample_size,
                                          population_size=accountant.config.population_size))
        spent = copy.get_privacy_spent()
    else:
        spent = accountant.get_privacy_spent()
    return {"epsilon": float(spent.epsilon), "delta": float(spent.delta), "releases": int(spent.num_releases),
            "accountant": f"flower {type(accountant).__name__}"}
