"""Flower integration: audit a real Flower federation for data leakage while it runs.

One job per module:

* :mod:`.convert` — Flower payloads (numpy arrays, ``ArrayRecord``, train configs) ↔ fedleak
  :class:`~fedleak.Update`, checked against the model.
* :mod:`.audit` — :class:`LeakageAudit`, a Message-API strategy (``flwr.serverapp.strategy``)
  wrapping any other: records every client's reply, attacks it in a worker pool, appends scores
  to ``OUT/leakage.jsonl``; ``ship=`` makes it a malicious server.
* :mod:`.canary` — :class:`CanaryAudit`, a Message-API strategy adding Andrew et al.'s canary clients to the
  aggregation of a real Flower strategy (a DP wrapper) and reporting both threats' one-run bounds and estimates
  beside Flower's accountant ε (``fedleak dp-audit``'s question, live).
* :mod:`.scoring` — the per-reply attack job and its scores (attacker-side, and against the true
  batch in evaluation mode).
* :mod:`.dashboard` — ``OUT/dashboard.html``: leakage per client per round, latest reconstructions.
* :mod:`.client` — the client side: :func:`inspector_mod` (refuses imprinted / trap-weight models),
  :func:`share_truth` (evaluation mode: a simulated client opts in to send its true batch, as a
  ConfigRecord Flower's DP code leaves alone), :func:`node_settings` (what a node protects and
  shares comes from its node config).
* :mod:`.guard` — the quarantine of replies the wrapped strategy could not aggregate.
* :mod:`.dp` — the Flower DP (wrappers, mods, σ, C, accountant ε) in force for each attacked reply.
* :mod:`.recipes` — Flower's DP modes around the audit (server wrapper, client mods).
* :mod:`.grid` — :class:`InlineGrid`: a Message-API ``Grid`` that runs ClientApps in this process
  (no Ray, no SuperLink), and :func:`run_inline`.
* :mod:`.app_loading`, :mod:`.app_runtime`, :mod:`.app_audit`, :mod:`.app_report` — ``fedleak audit --flower-app
  PATH``: the user's own app loaded by Flower's code, run in Flower's simulation runtime with its strategy's
  ``start`` wrapped by ``LeakageAudit`` (and ``CanaryAudit``), written as the audit's ``report.html`` /
  ``metrics.json`` with one overall verdict line.
* :mod:`.demo` — ``python -m fedleak.integrations.flower.demo``.
* :mod:`.legacy` — :class:`LeakageRecorder` for the legacy ``flwr.server.strategy`` API.

``flwr`` is optional for :mod:`.convert`; everything else needs it (``pip install "fedleak[flower]"``).
"""

from .convert import (CONFIG_ALIASES, KEYS, model_arrays, model_record, protocol_from_config, record_arrays,
                      split_arrays, split_record, update_from_arrays)
from .legacy import FLOWER_AVAILABLE, LeakageRecorder

__all__ = ["CONFIG_ALIASES", "FLOWER_AVAILABLE", "KEYS", "LeakageRecorder", "model_arrays", "model_record",
           "protocol_from_config", "record_arrays", "split_arrays", "split_record", "update_from_arrays"]

try:  # the Message API (flwr >= 1.20)
    from .audit import LeakageAudit
    from .client import TRUTH_KEY, inspector_mod, node_settings, share_truth
    from .grid import InlineGrid, run_inline

    __all__ += ["CanaryAudit", "LeakageAudit", "TRUTH_KEY", "inspector_mod", "node_settings", "share_truth", "InlineGrid",
                "run_inline"]
except ImportError:  # pragma: no cover - flwr absent or too old
    pass


def __getattr__(name: str):
    """``CanaryAudit`` on first use (PEP 562): it imports :mod:`fedleak.privacy` (scipy), which a ClientApp process
    importing this package never needs (about 1 CPU-s in each one Flower 1.42 starts per message, measured)."""
    if name == "CanaryAudit":
        from .canary import CanaryAudit

        return CanaryAudit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
