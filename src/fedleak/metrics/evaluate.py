"""``evaluate``: score one reconstruction against one client's data (the entry point: the spec's modality scores it;
images: :mod:`.images`, text: :mod:`.text`)."""

from __future__ import annotations

import os

import torch

from ..types import ClientData, DataSpec, Reconstruction
from .images import (DEFAULT_THRESHOLD, DEFAULT_THRESHOLDS, check_pair, default_threshold,  # noqa: F401  (re-exported)
                     evaluate_images)


def evaluate(rec: Reconstruction, client: ClientData, spec: DataSpec, *,
             threshold: float | None = None, clip: bool = True, match: bool = True,
             lpips: bool | str | os.PathLike = False,
             iip_pool: torch.Tensor | None = None, tokenizer=None) -> dict:
    """Score the reconstruction ``rec`` of ``client``'s data; returns a plain JSON-able dict.

    Protocol (Dimitrov et al., "Data Leakage in Federated Averaging", TMLR 2022, App. A.8):

    1. Both sets are de-normalized with ``spec.denormalize``; with ``clip`` (default) they are
       clamped to ``spec.pixel_range``. ``clip=False`` is the paper's protocol (unclipped,
       ``data_range`` 1).
    2. With ``match`` (default) reconstructions are paired with originals by
       ``linear_sum_assignment`` on −PSNR (:func:`match_by_psnr`), min(N, N') pairs; without it,
       reconstruction i is paired with original i.
    3. Every original gets a partner image. An original left unmatched (N' < N) is scored
       against the *dataset mean image* (an all-zero reconstruction in normalized space, the
       natural "nothing recovered" guess) and never counts as recovered or identified.
       Reconstructions containing NaN/inf are replaced by that mean image and count in
       ``nan_inputs``.
    4. Per original: MSE, PSNR (``data_range`` = width of ``spec.pixel_range``), SSIM (Wang et al.
       2004, Gaussian 11×11 window) and optionally LPIPS (Zhang et al. 2018); means over all N
       originals. Pixel-exact PSNR (+inf) is reported as 200 dB (:data:`PSNR_CAP`), per input and
       in the mean.
    5. ``rec_percent``: percent of originals whose matched reconstruction has PSNR > δ
       (``threshold``; default from :func:`default_threshold`: 19 dB for CIFAR100, else 20 dB).
    6. ``iip``: image identifiability precision (Yin et al. 2021) in pixel L2 over the client's
       originals plus ``iip_pool`` (normalized images, de-normalized/clipped like the rest).
    7. Labels, when ``rec.labels`` is set: ``label_count_error`` = ½ Σ_c |n_c − n̂_c| and
       ``label_accuracy`` = multiset overlap / N; else both ``None``.

    ``lpips``: ``False`` skips it (``"lpips": None``); ``True`` uses ``$FEDLEAK_LPIPS_WEIGHTS``; a
    path uses that file. If no usable weights are found, ``"lpips"`` is ``None`` and
    ``"lpips_note"`` says why. Computation happens on the client's device, in the inputs' dtype
    (at least float32). Raises :class:`FedleakError` for shape mismatches, an empty
    or non-finite client inputs. A text or tabular ``spec`` is scored by its modality: records by
    :func:`fedleak.metrics.tabular.evaluate` (cells right, whole records, random and prior baselines), text by
    :func:`fedleak.metrics.text.evaluate_text` (ROUGE-1/2/L, exact sequences, token accuracy;
    ``tokenizer`` decodes for ROUGE on text). An empty reconstruction (an attack that recovered nothing, e.g. an
    imprint readout with no occupied bin) scores every original against the mean image.
    """
    check_pair(rec, client)
    from ..modality import named  # the spec's modality scores it (images below; text: metrics/text.py)

    return named(spec).score(rec, client, spec, threshold=threshold, clip=clip, match=match, lpips=lpips,
                             iip_pool=iip_pool, tokenizer=tokenizer)
