"""Malicious imprint modules (a package): Fowl et al., "Robbing the Fed" (ICLR 2022), and CAH trap weights.

The server sends a model with an *imprint block* (§3.3): a linear layer with bias followed by a
nonlinearity, whose k rows all measure the same linear function h of their input, with biases
at the quantiles of h's distribution. Each row therefore "switches on" for the inputs in a known
interval ("bin") of h, and the gradient (or FedAvg weight change) of the block's weight and bias
holds the sum of the inputs in each bin; an input alone in its bin is read back verbatim by
:mod:`fedleak.attacks.imprint` (Eq. 4), without any optimization.

What is here (the server's side):

* :func:`linear_function` — h: mean brightness, a DCT-II basis vector, a Gaussian random
  direction (App. A.2).
* :class:`Distribution` — the server's belief about h: Gaussian or unit-variance Laplacian CDF
  (loc/scale assumed or fitted), or an empirical CDF fitted on a few surrogate inputs (App. A.2,
  Fig. 5), smoothed by a Gaussian kernel so that quantiles exist at any mass.
* :class:`ImprintBlock` — linear + ReLU (cumulative bins, §3.3) or a thresholding nonlinearity
  (``hardtanh`` or two ReLUs, the sparse FedAvg variant of §4.3), followed by a connection whose
  effect is identical for every row, so ∂L/∂bᵢ is the same function of each input for all rows
  (App. B): ``add`` (the input plus a multiple of the summed activations) or ``linear`` (a linear
  layer with identical row elements).
* :class:`Imprinted` — a model with the block in front (§3.3, §4.1) or in front of / after any
  submodule (§4.3 "flexible placement"; after the token embeddings of a language model, App.
  A.4). It exposes the server's secrets with :meth:`Imprinted.imprint_secrets`.
* :func:`imprint` — builds one from any model; structures ``cumulative`` (§3.3), ``sparse``
  (§4.3), ``one-shot`` (§4.2, bins fused to two rows) and ``cah`` (the trap weights of Boenisch et
  al., "When the Curious Abandon Honesty", compared in App. A.8).
* :func:`linearize_resnet` — the deeper placement of §4.3 / App. A.5: the layers of a ResNet in
  front of the block become near-identity maps (BatchNorm reset, residual paths zeroed, first and
  shortcut convolutions Dirac on the first three channels, ReLUs bypassed by bias shifting).

**Secrets.** Which parameters form the block, the row order (rows are randomly permuted, §3.3)
and the bin edges are the server's secrets. They are fixed when the model is built and returned
by ``model.imprint_secrets()`` (a JSON-able dict, format ``fedleak.imprint/1``); the attack takes
them from ``update.metadata["imprint"]`` when the server recorded them there, else from the model
it is given (the server's own copy). Nothing in them depends on client data.

Layout: :mod:`.options` (option names, validation), :mod:`.distribution` (h and its CDF),
:mod:`.block` (the block, :class:`Imprinted`), :mod:`.placement` (where the block goes, ResNet
linearization), :mod:`.bins` (bin edges and the cumulative / sparse / one-shot / CAH rows),
:mod:`.build` (:func:`imprint`), :mod:`.registered` (the zoo entry ``"imprint"``).
"""

from __future__ import annotations

import sys
import types

from .block import Imprinted, ImprintBlock, Threshold
from .build import imprint
from .distribution import Distribution, linear_function
from .options import CDFS, CONNECTIONS, LINFUNCS, ONE_SHOT, SECRETS_FORMAT, SIDES, STRUCTURES, THRESHOLDS
from .placement import linearize_resnet
from .registered import imprinted

__all__ = [
    "Distribution", "ImprintBlock", "Imprinted", "Threshold", "imprint", "linear_function",
    "linearize_resnet", "LINFUNCS", "CDFS", "STRUCTURES", "CONNECTIONS",
]


class _CallableModule(types.ModuleType):
    """Lets ``fedleak.models.imprint(model, spec, bins=k, ...)`` call :func:`imprint` while
    ``fedleak.models.imprint`` stays this module (``fedleak.models.imprint.ImprintBlock`` etc.)."""

    def __call__(self, *args, **kwargs) -> Imprinted:
        return imprint(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
