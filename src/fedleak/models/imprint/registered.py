"""The zoo entry ``"imprint"``: a zoo model with an imprint block (Fowl et al. 2022, §3.3, §4).

``fedleak.models.build("imprint", spec, seed, base=..., bins=..., ...)`` builds the base model
and calls :func:`fedleak.models.imprint.imprint` on it, optionally fitting the distribution of h
on surrogate inputs from a dataset (App. A.2, Fig. 5).
"""

from __future__ import annotations

from typing import Optional

import torch

from ...errors import FedleakError
from ...types import DataSpec
from ..registry import build as build_model
from ..registry import register
from .block import Imprinted
from .build import imprint
from .options import check_positive


@register("imprint", "Robbing the Fed (Fowl et al. 2022): an imprint block (cumulative / sparse / one-shot / "
                     "CAH trap weights) in front of or inside a zoo model (base option, default resnet18)")
def imprinted(spec: DataSpec, *, base: str = "resnet18", base_options: Optional[dict] = None, bins: int = 128,
              structure: str = "cumulative", linfunc: str = "mean", cdf: str = "gaussian",
              loc: Optional[float] = None, scale: Optional[float] = None, position: Optional[str] = None,
              side: str = "before", connection: str = "add", connection_scale: Optional[float] = None,
              gain: float = 1.0, threshold: str = "hardtanh", permute: bool = True, mode: int = 32,
              target: float = 0.5, one_shot: str = "sparse", cah_sigma: float = 0.5, cah_scale: float = 0.95,
              surrogate_root: Optional[str] = None, surrogate_split: str = "test",
              surrogate_count: int = 256) -> Imprinted:
    """``fedleak.models.build("imprint", spec, seed, base=..., bins=..., ...)``: see :func:`imprint`.

    The base model and the block are both deterministic in the build seed. With
    ``surrogate_root`` the distribution of h is fitted on ``surrogate_count`` inputs of the
    dataset ``spec.name`` from ``surrogate_split`` (the server's own data, e.g. the test split),
    else ``loc``/``scale`` describe it.
    """
    if not isinstance(base, str) or base == "imprint":
        raise FedleakError(f"imprint option 'base' must name a zoo model, got {base!r}")
    seeds = torch.randint(0, 2**31 - 1, (2,)).tolist()
    model = build_model(base, spec, seed=int(seeds[0]), **(base_options or {}))
    surrogate = None
    if surrogate_root is not None:
        from ...data import load

        count = check_positive("surrogate_count", surrogate_count, integer=True)
        _, clients = load(spec.name, root=surrogate_root, num_clients=1, samples_per_client=count, seed=0,
                          split=surrogate_split)
        surrogate = clients[0].inputs
    return imprint(model, spec, bins=bins, structure=structure, linfunc=linfunc, cdf=cdf, surrogate=surrogate,
                   loc=loc, scale=scale, position=position, side=side, connection=connection,
                   connection_scale=connection_scale, gain=gain, threshold=threshold, permute=permute, mode=mode,
                   target=target, one_shot=one_shot, cah_sigma=cah_sigma, cah_scale=cah_scale, seed=int(seeds[1]))
