"""The malicious server's options checked before any work (plan stage): ``--attacks loki`` needs an aggregate of
K ≥ 2 clients and a LOKI layer within its size limit (Zhao et al., IEEE S&P 2024; :mod:`fedleak.models.loki`),
``--attacks fishing`` is refused (it needs the server's fishing model).

Split from :mod:`fedleak.audit.execute.malicious` (which re-exports both) so that the image modality, which checks
its model against these before any attack, imports no module of the execute stage.
"""

from __future__ import annotations

from ...errors import FedleakError
from ...models.loki import check_budget


def check(cfg, spec, plans) -> None:
    """Before any work: ``--attacks loki`` needs K ≥ 2 (at every point, unless another malicious attack
    is named for the points of a sweep without secure aggregation) and a LOKI layer that fits."""
    if cfg.attacks and "fishing" in cfg.attacks:
        raise FedleakError("--attacks fishing: class fishing is not an audit attack (it needs the server's fishing "
                           "model); use fedleak.models.fishing.fishing with fedleak.attacks.build('fishing') "
                           "(docs/malicious.md)")
    if not cfg.attacks or "loki" not in cfg.attacks or not cfg.malicious:
        return
    others = [a for a in cfg.attacks if a in ("imprint", "imprint-sparse", "imprint-one-shot", "cah")]
    for plan in plans:
        if plan.secagg < 2 and others and any(p.secagg >= 2 for p in plans):
            continue  # a sweep point without secure aggregation: the other malicious attacks run there
        if plan.secagg < 2:
            raise FedleakError("--attacks loki attacks a secure aggregate of several clients (each gets its own "
                               f"model): give --defense secagg:K with K >= 2 (got K = {plan.secagg})")
        check_budget(plan.secagg, cfg.bins, spec.shape)


def fits(plan, spec, bins: int) -> bool:
    """LOKI applies: images, K ≥ 2 and the per-client FC layer within the size limit."""
    if plan.secagg < 2:
        return False
    try:
        check_budget(plan.secagg, bins, spec.shape)
    except FedleakError:
        return False
    return True


__all__ = ["check", "fits"]
