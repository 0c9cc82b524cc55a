"""Read-only walks of Flower's wrapper chains, shared by the ``--flower-app`` runtime (:mod:`.app_runtime`) and its
canary nodes (:mod:`.app_canary_nodes`, :mod:`.app_canary_claim`), below all three so that none imports another
for them:

* :func:`chain` — a strategy and every strategy it wraps (Flower's DP wrappers and fedleak's audit keep the wrapped
  one in ``.strategy``), outermost first;
* :data:`CLIENTAPP_CALL` — Flower's own ``ClientApp.__call__``, taken when this module is first imported (before
  the canary nodes swap it for the length of a canary call, or of reading a node's ``LocalDpMod``);
* :func:`own_train` — the function inside a ClientApp's train mods (the app's own train function), following
  ``make_ffn``'s closures as :func:`.canary_nodes.train_mods` does.
"""

from __future__ import annotations

from flwr.clientapp import ClientApp

from .canary_nodes import train_mods

CLIENTAPP_CALL = ClientApp.__call__


def chain(strategy) -> list:
    """The strategy and every strategy it wraps (``.strategy`` attributes), outermost first."""
    out, node = [], strategy
    while node is not None and len(out) < 32 and all(node is not seen for seen in out):
        out.append(node)
        node = getattr(node, "strategy", None)
    return out


def own_train(app: ClientApp):
    """The function inside ``app``'s train mods (the app's own train function)."""
    func = app._registered_funcs.get("train.default") or app._call  # noqa: SLF001 - Flower's chain, read only
    for _ in train_mods(app):
        func = dict(zip(func.__code__.co_freevars, (c.cell_contents for c in func.__closure__)))["_ffn"]
    return func
