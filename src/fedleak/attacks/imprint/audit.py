"""The malicious-server section of ``fedleak audit``: Robbing the Fed against one client (Fowl et al. 2022, §3.3, §4.3)."""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import FedleakError
from ...types import DataSpec
from .attack import ImprintAttack
from .expectations import expected_recovered


def audit_section(spec: DataSpec, clients, seed: int = 0, *, model="resnet18", bins: int = 128,
                  client_index: int = 0, protocol=None, surrogate: Optional[torch.Tensor] = None,
                  linfunc: str = "randn", verbatim_db: float = 60.0) -> dict:
    """The malicious-server section of ``fedleak audit``: Robbing the Fed against one client.

    The server puts a ``bins``-row imprint block in front of the audit model (a zoo name or an
    ``nn.Module``), the client ``clients[client_index]`` trains on it under ``protocol`` (default
    FedSGD; FedAvg uses the sparse block of §4.3), and the attack reads the inputs back. h is a
    Gaussian random direction with the N(0, 1) assumption (App. A.2) unless ``surrogate`` inputs
    (the server's own data) are given to fit it. Returns a dict: ``metrics`` from
    :func:`fedleak.metrics.evaluate`, ``verbatim_percent`` (PSNR > ``verbatim_db``),
    ``expected_percent`` (Proposition 1), the attack's own count of single-input bins, timing,
    and ``reconstruction`` (a :class:`~fedleak.types.Reconstruction`, not JSON; drop it before
    serializing).
    """
    from ...fl.client import client_update
    from ...metrics import evaluate
    from ...models import build as build_model
    from ...models.imprint import imprint
    from ...types import ClientData, Protocol

    clients = list(clients)
    if not clients or not 0 <= client_index < len(clients):
        raise FedleakError(f"audit_section: client_index {client_index} out of range for {len(clients)} clients")
    client = clients[client_index]
    if not isinstance(client, ClientData):
        raise FedleakError(f"audit_section needs ClientData, got {type(client).__name__}")
    protocol = protocol if protocol is not None else Protocol("fedsgd")
    base = build_model(model, spec, seed=seed) if isinstance(model, str) else model
    structure = "cumulative" if protocol.algorithm == "fedsgd" else "sparse"
    # FedAvg: small rows (c0 = 1e-3) keep the lr-scaled update above float32 rounding (robbing-fedavg preset)
    gain = 1.0 if structure == "cumulative" else 1e-3
    malicious = imprint(base, spec, bins=bins, structure=structure, linfunc=linfunc, gain=gain,
                        surrogate=surrogate, seed=seed)
    update = client_update(malicious, client, protocol, seed=seed)
    attack = ImprintAttack()
    attack.variant = "imprint" if structure == "cumulative" else "imprint-sparse"
    rec = attack.reconstruct(update, malicious, spec)
    metrics = evaluate(rec, client, spec)
    verbatim = sum(1 for p in metrics["psnr_per_input"] if p is not None and p > verbatim_db)
    n = len(client)
    return {
        "section": "malicious-server",
        "title": "Robbing the Fed: malicious imprint module (Fowl et al., ICLR 2022)",
        "threat_model": "the server modifies the model it sends; the client trains honestly",
        "attack": attack.variant,
        "model": model if isinstance(model, str) else type(model).__name__,
        "structure": structure,
        "bins": bins,
        "added_parameters": int(sum(p.numel() for p in malicious.imprint.parameters())),
        "protocol": protocol.to_json(),
        "client_id": client.client_id,
        "num_inputs": n,
        "metrics": metrics,
        "verbatim_db": verbatim_db,
        "verbatim_percent": 100.0 * verbatim / n,
        "expected_percent": 100.0 * expected_recovered(n, bins) / n,
        "single_bins_reported": len(rec.extras["single_bins"]),
        "recovery_seconds": rec.extras["seconds"],
        "reconstruction": rec,
    }
