"""Splitting a pool of samples into federated clients.

Every function returns a list of int64 index arrays, one per client, into the pool (in the pool's
order). All randomness comes from ``numpy.random.default_rng(seed)``, so the same seed gives the
same split on every machine.

* :func:`iid` — a seeded random permutation cut into consecutive chunks.
* :func:`sequential` — consecutive chunks in the pool's (file) order, no randomness.
* :func:`dirichlet` — label-skewed clients. With a fixed client size each client draws class
  proportions ``q ~ Dir(alpha · 1_K)`` and then its samples class by class (Hsu, Qi & Brown 2019,
  "Measuring the effects of non-identical data distribution for federated visual
  classification"); when ``per_client`` is ``None`` every class is divided over the clients with
  proportions ``p ~ Dir(alpha · 1_clients)`` (Yurochkin et al. 2019). Small ``alpha`` gives clients
  that hold few classes; large ``alpha`` approaches IID.

``per_client=None`` means "divide the whole pool": ``iid`` and ``sequential`` then give
``num_clients`` nearly equal parts. When the pool runs out, fewer clients (and possibly a smaller
last client) are returned; empty clients are never returned.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..errors import FedleakError, unknown_choice

PARTITIONS = {
    "iid": "seeded random split into equal chunks",
    "dirichlet": "label-skewed split, class proportions ~ Dirichlet(alpha)",
    "sequential": "consecutive chunks in file order",
}


def _check_sizes(num_items: int, num_clients: int, per_client: Optional[int]) -> None:
    if int(num_clients) != num_clients or num_clients < 1:
        raise FedleakError(f"num_clients must be a positive integer, got {num_clients!r}")
    if per_client is not None and (int(per_client) != per_client or per_client < 1):
        raise FedleakError(f"samples_per_client must be a positive integer or None, got {per_client!r}")
    if num_items < 1:
        raise FedleakError("cannot partition an empty dataset")


def _chunks(order: np.ndarray, num_clients: int, per_client: Optional[int]) -> list[np.ndarray]:
    if per_client is None:
        parts = np.array_split(order, min(num_clients, len(order)))
    else:
        parts = [order[start:start + per_client] for start in range(0, len(order), per_client)]
        parts = parts[:num_clients]
    return [np.asarray(p, dtype=np.int64) for p in parts if len(p) > 0]


def sequential(num_items: int, num_clients: int, per_client: Optional[int]) -> list[np.ndarray]:
    """Client ``k`` gets items ``k·per_client … (k+1)·per_client − 1`` in pool order."""
    _check_sizes(num_items, num_clients, per_client)
    return _chunks(np.arange(num_items, dtype=np.int64), num_clients, per_client)


def iid(num_items: int, num_clients: int, per_client: Optional[int], seed: int = 0) -> list[np.ndarray]:
    """Consecutive chunks of a random permutation drawn with ``default_rng(seed)``."""
    _check_sizes(num_items, num_clients, per_client)
    order = np.random.default_rng(seed).permutation(num_items).astype(np.int64)
    return _chunks(order, num_clients, per_client)


def dirichlet(labels: Sequence[int], num_clients: int, per_client: Optional[int],
              alpha: float = 0.5, seed: int = 0) -> list[np.ndarray]:
    """Label-skewed clients (see the module docstring); samples within a client are shuffled."""
    labels = np.asarray(labels).reshape(-1)
    _check_sizes(len(labels), num_clients, per_client)
    if not (isinstance(alpha, (int, float)) and np.isfinite(alpha) and alpha > 0):
        raise FedleakError(f"dirichlet alpha must be a positive number, got {alpha!r}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    # Each class's pool in a random order; we take from the front.
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    if per_client is None:
        return _dirichlet_by_class(pools, num_clients, alpha, rng)
    taken = np.zeros(len(classes), dtype=np.int64)
    sizes = np.array([len(p) for p in pools], dtype=np.int64)
    clients = []
    for _ in range(num_clients):
        if taken.sum() == sizes.sum():
            break
        q = rng.dirichlet(np.full(len(classes), float(alpha)))
        want = rng.multinomial(per_client, q)
        picked = []
        need = per_client
        while need > 0:
            left = sizes - taken
            take = np.minimum(want, left)
            for c in np.flatnonzero(take):
                picked.append(pools[c][taken[c]:taken[c] + take[c]])
                taken[c] += take[c]
            need -= int(take.sum())
            left = sizes - taken
            if need == 0 or left.sum() == 0:
                break
            # Classes that ran out: redraw the shortfall over the classes still in stock.
            q_left = np.where(left > 0, q, 0.0)
            q_left = q_left / q_left.sum() if q_left.sum() > 0 else (left > 0) / (left > 0).sum()
            want = rng.multinomial(need, q_left)
        if picked:
            chosen = np.concatenate(picked)
            clients.append(rng.permutation(chosen).astype(np.int64))
    return clients


def _dirichlet_by_class(pools: list[np.ndarray], num_clients: int, alpha: float,
                        rng: np.random.Generator) -> list[np.ndarray]:
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for pool in pools:
        p = rng.dirichlet(np.full(num_clients, float(alpha)))
        cuts = (np.cumsum(p)[:-1] * len(pool)).astype(np.int64)
        for k, piece in enumerate(np.split(pool, cuts)):
            parts[k].append(piece)
    clients = [rng.permutation(np.concatenate(part)).astype(np.int64) for part in parts]
    return [c for c in clients if len(c) > 0]


def split(method: str, labels: Sequence[int], num_clients: int, per_client: Optional[int],
          seed: int = 0, alpha: float = 0.5) -> list[np.ndarray]:
    """Dispatch on ``method`` (one of :data:`PARTITIONS`)."""
    n = len(labels)
    if method == "iid":
        return iid(n, num_clients, per_client, seed)
    if method == "sequential":
        return sequential(n, num_clients, per_client)
    if method == "dirichlet":
        return dirichlet(labels, num_clients, per_client, alpha, seed)
    raise unknown_choice("partition", method, PARTITIONS)
