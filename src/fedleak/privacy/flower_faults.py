"""Faults planted inside the real Flower (issue #42, item 3): to show that the client-level audit finds them.

Each fault monkeypatches Flower 1.42's own functions where its mods and DP wrappers call them, for the duration of a
``with planted(...)`` block; nothing in the audit knows which is active (:mod:`.federation` sees only the replies
and the aggregates Flower's strategy releases):

* ``noise=F`` — ``add_gaussian_noise_inplace`` as ``flwr.serverapp.strategy.dp_fixed_clipping``,
  ``…dp_adaptive_clipping`` and ``flwr.clientapp.mod.localdp_mod`` call it draws F × the standard deviation it is
  given (the central wrappers' noise on the aggregate, LocalDpMod's on each reply);
* ``no-clip`` — ``compute_clip_model_update`` (``fixedclipping_mod``, ``LocalDpMod``, the server-side fixed
  wrapper) leaves the update as it is; ``compute_adaptive_clip_model_update`` (``adaptiveclipping_mod``) and
  ``adaptive_clip_inputs_inplace`` (the server-side adaptive wrapper) return the norm bit without clipping.

A mod missing on some nodes (Flower FLIP #1122: the client-side mods are opt-in per ClientApp) is no patch: those
nodes' ClientApps are built without the mod (:func:`.federation.run_federation`, ``no_dp_clients``).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from ..errors import FedleakError

FAULTS = ("noise=0.5", "noise=0.1", "no-clip")


@contextlib.contextmanager
def planted(noise_factor: float = 1.0, no_clip: bool = False) -> Iterator[list]:
    """Plant the faults in Flower's real modules; yields the functions patched (empty: none)."""
    import flwr.clientapp.mod.centraldp_mods as central_mods
    import flwr.clientapp.mod.localdp_mod as local_mod
    import flwr.serverapp.strategy.dp_adaptive_clipping as adaptive
    import flwr.serverapp.strategy.dp_fixed_clipping as fixed
    from flwr.supercore.differential_privacy import add_gaussian_noise_inplace, get_norm

    if not (np.isfinite(noise_factor) and noise_factor >= 0):
        raise FedleakError(f"--fault noise=F needs a finite F ≥ 0, got {noise_factor!r}")
    patches: list[tuple[object, str, object]] = []
    if noise_factor != 1.0:
        def noise(arrays, std_dev):
            add_gaussian_noise_inplace(arrays, std_dev * noise_factor)

        patches += [(module, "add_gaussian_noise_inplace", noise) for module in (fixed, adaptive, local_mod)]
    if no_clip:
        def unclipped(param1, param2, clipping_norm):
            return None

        def unclipped_adaptive(param1, param2, clipping_norm):
            update = [np.subtract(x, y) for x, y in zip(param1, param2)]
            return bool(get_norm(update) > clipping_norm)

        patches += [(module, "compute_clip_model_update", unclipped) for module in (central_mods, local_mod, fixed)]
        patches += [(central_mods, "compute_adaptive_clip_model_update", unclipped_adaptive),
                    (adaptive, "adaptive_clip_inputs_inplace", lambda arrays, clipping_norm: bool(
                        get_norm(arrays) > clipping_norm))]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, new in patches:
            setattr(owner, name, new)
        yield [f"{owner.__name__}.{name}" for owner, name, _ in patches]
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)
