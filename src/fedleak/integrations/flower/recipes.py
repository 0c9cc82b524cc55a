"""Flower's DP modes around a :class:`~fedleak.integrations.flower.LeakageAudit`, as a Flower user
writes them: one helper for the server (which wrapper, σ, C, the audit inside or around it, Flower's
accountant) and one for the client (which mods). Used by the example app and the tests.

Modes (``dp=``): ``none``; ``server-fixed`` / ``server-adaptive``
(``DifferentialPrivacyServerSide{Fixed,Adaptive}Clipping``, no client mod); ``client-fixed`` /
``client-adaptive`` (``DifferentialPrivacyClientSide…`` with ``fixedclipping_mod`` /
``adaptiveclipping_mod`` on the clients); ``local`` (``LocalDpMod`` on the clients, no wrapper).
``audit="outer"``: ``LeakageAudit(wrapper(FedAvg))``, the audit sees what clients send;
``audit="inner"``: ``wrapper(LeakageAudit(FedAvg))``, the audit sees what the wrapper passes on.
"""

from __future__ import annotations

from typing import Callable

from ...errors import FedleakError, unknown_choice

DP_MODES = ("none", "server-fixed", "server-adaptive", "client-fixed", "client-adaptive", "local")
POSITIONS = ("outer", "inner")
#: δ of Flower's accountant, and of LocalDpMod's (ε, δ)
DELTA = 1e-5


def check(mode: str, audit: str = "outer") -> None:
    if mode not in DP_MODES:
        raise unknown_choice("dp mode", mode, DP_MODES)
    if audit not in POSITIONS:
        raise unknown_choice("audit position", audit, POSITIONS)


def client_mods(mode: str, clip: float, local_epsilon: float = 8.0) -> list:
    """The Flower client mods a DP mode needs (``LocalDpMod(C, sensitivity C, ε, δ)`` for ``local``)."""
    from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod

    check(mode)
    return {"client-fixed": [fixedclipping_mod], "client-adaptive": [adaptiveclipping_mod],
            "local": [LocalDpMod(clip, clip, local_epsilon, DELTA)]}.get(mode, [])


def accountant(clients: int):
    """Flower's RDP accountant, no amplification (what its fixed-clipping wrappers accept)."""
    from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    try:
        return RdpAccountant(PrivacyConfig(target_delta=DELTA, population_size=clients,
                                           neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                                           sampling_method=SamplingMethod.NO_AMPLIFICATION))
    except ImportError as exc:  # dp-accounting absent
        raise FedleakError(f"Flower's accountant needs dp-accounting ({exc}): pip install \"fedleak[flower]\"") \
            from None


def server_strategy(mode: str, audit: str, base, make_audit: Callable, *, noise: float, clip: float, clients: int):
    """``(strategy to start, the LeakageAudit)`` for a DP mode and an audit position.

    ``base``: the strategy doing the work (``FedAvg``); ``make_audit(strategy, accountant)``
    builds the ``LeakageAudit`` around ``strategy``. Fixed clipping gets Flower's accountant:
    on the wrapper when it wraps ``FedAvg`` directly, else handed to the audit (:func:`.dp.epsilon`).
    """
    from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                         DifferentialPrivacyClientSideFixedClipping,
                                         DifferentialPrivacyServerSideAdaptiveClipping,
                                         DifferentialPrivacyServerSideFixedClipping)

    check(mode, audit)
    if mode in ("none", "local"):
        made = make_audit(base, None)
        return made, made
    fixed = {"server-fixed": DifferentialPrivacyServerSideFixedClipping,
             "client-fixed": DifferentialPrivacyClientSideFixedClipping}
    adaptive = {"server-adaptive": DifferentialPrivacyServerSideAdaptiveClipping,
                "client-adaptive": DifferentialPrivacyClientSideAdaptiveClipping}

    def wrap(inner, with_accountant):
        if mode in fixed:
            return fixed[mode](inner, noise, clip, clients,
                               **({"accountant": accountant(clients)} if with_accountant else {}))
        # Flower's default clipped-count noise (clients/20) is too small for σ > clients/10 on a few clients
        return adaptive[mode](inner, noise, clients, initial_clipping_norm=clip,
                              clipped_count_stddev=max(clients / 20, noise))

    if audit == "outer":
        made = make_audit(wrap(base, True), None)
        return made, made
    made = make_audit(base, accountant(clients) if mode in fixed else None)
    return wrap(made, False), made
