"""Metrics: how close a reconstruction is to a client's private data.

:func:`evaluate` is the one entry point used by the experiment runner and the reports; the
building blocks are exposed for attacks (e.g. MatchEpoch, which pairs per-epoch candidates by
−PSNR) and for custom analyses:

* :func:`mse`, :func:`psnr`, :func:`ssim`, :func:`psnr_matrix` — per-image pixel metrics
  (:mod:`fedleak.metrics.pixel`);
* :func:`match_by_psnr`, :func:`rec_percent`, :func:`iip` — pairing, Rec% at δ, identifiability
  (:mod:`fedleak.metrics.matching`);
* :func:`label_count_error`, :func:`label_accuracy` (:mod:`fedleak.metrics.labels`);
* :func:`lpips`, :func:`load_lpips`, :func:`convert_lpips_weights` — LPIPS from a local weights
  file only (:mod:`fedleak.metrics.perceptual`).

Sources: Dimitrov et al. 2022 (App. A.8: matching, Rec%), Wang et al. 2004 (SSIM), Yin et al.
2021 (IIP), Zhang et al. 2018 (LPIPS).
"""

from .evaluate import DEFAULT_THRESHOLDS, default_threshold, evaluate
from .labels import label_accuracy, label_count_error, label_counts
from .matching import identity_assignment, iip, match_by_psnr, rec_percent
from .perceptual import LPIPS, LPIPS_WEIGHT_SHAPES, convert_lpips_weights, load_lpips, lpips
from .text import ROUGE_TYPES, evaluate_text, text_scores
from .pixel import PSNR_CAP, gaussian_window, mse, psnr, psnr_matrix, ssim

__all__ = [
    "evaluate", "default_threshold", "DEFAULT_THRESHOLDS", "PSNR_CAP",
    "mse", "psnr", "ssim", "psnr_matrix", "gaussian_window",
    "match_by_psnr", "identity_assignment", "rec_percent", "iip",
    "label_count_error", "label_accuracy", "label_counts",
    "text_scores", "evaluate_text", "ROUGE_TYPES",
    "lpips", "load_lpips", "convert_lpips_weights", "LPIPS", "LPIPS_WEIGHT_SHAPES",
]
