"""Images as a modality: ``fedleak audit --data digits|femnist|cifar10|…`` (the paper datasets and image folders).

The object :data:`IMAGE` gives the audit's shared stages (:mod:`fedleak.audit.run`) what is particular to images:
the data (:func:`fedleak.data.load`), the model checked against it (:mod:`fedleak.audit.plan.model_loading`), the
honest server's attacks (Inverting Gradients on FedSGD; Dimitrov et al., AGIC, AWA on FedAvg) and the exact ones
where a first linear layer allows them (row/bias ratio, SPEAR), the metrics (PSNR, SSIM, Rec %, IIP:
:func:`fedleak.metrics.evaluate`), what one recovered image is (PSNR above the Rec % threshold; verbatim above
60 dB for the malicious imprint) and the report's section (:mod:`.report`: image grids, PSNR plots). Images are
also the modality of any data name no other modality claims (the fallback of :func:`fedleak.modality.of`).
"""

from __future__ import annotations

from pathlib import Path

from ..base import Modality
from . import execute, report


class ImageModality(Modality):
    name = "image"
    items = "images"
    default_model = "femnist-cnn"  # fedleak.audit.plan.default.DEFAULT_MODEL
    recovered_item = ("an image whose reconstruction's PSNR against its original is above the Rec% threshold "
                      "(20 dB; 19 dB for CIFAR-100)")

    @property
    def rule(self) -> str:
        from ...audit.judge.verdict import RULE

        return RULE

    def matches(self, data) -> bool:
        return True  # every name no other modality claims is a dataset of images (asked last)

    # -- plan ---------------------------------------------------------------------------------------
    def honest_attacks(self, algorithm: str) -> list:
        from ...audit.plan.threats import HONEST_ATTACKS

        return list(HONEST_ATTACKS[algorithm])

    def default_attack(self, algorithm: str) -> str:
        return "inverting-gradients"  # ``fedleak attack``'s default since it exists, FedSGD and FedAvg alike

    def required_exact(self, model, protocol, samples: int) -> list:
        """The row/bias ratio for one sample, SPEAR for a batch, when the first layer is linear with a bias and the
        update is one gradient step (:func:`fedleak.audit.plan.threats.exact_applicable`)."""
        from ...audit.plan.threats import exact_applicable

        if exact_applicable(model, protocol, samples) is not None:
            return []
        return ["analytic-fc" if samples == 1 else "spear"]

    def required_optimization(self, algorithm: str) -> list:
        from ...attacks.base import ATTACKS, ensure_loaded
        from ...audit.plan.threats import HONEST_ATTACKS, kind

        ensure_loaded()
        return [n for n in HONEST_ATTACKS[algorithm] if n in ATTACKS and kind(n) == "optimization"]

    def check_attack_name(self, name: str, text_names: set) -> None:
        if name in text_names:
            from ...errors import FedleakError

            raise FedleakError(f"--attacks {name}: a text attack; it needs --data text")

    # -- data and model -----------------------------------------------------------------------------
    def prepare(self, cfg, needed: int, samples: int):
        from ... import data

        spec, pool = data.load(cfg.data, root=cfg.data_root, num_clients=needed, samples_per_client=samples,
                               seed=cfg.seed)
        return cfg.model, spec, pool

    def models(self, cfg, model_name: str, spec, pool: list, plans: list, device, show):
        """One model for every setting: built (weights loaded), fitted to the data, the malicious runs' options
        checked against it, before any attack."""
        from ...audit.plan import malicious
        from ...audit.plan.model_loading import check_fits, prepare_model

        model = prepare_model(cfg.model, spec, seed=cfg.model_seed, weights=cfg.weights)
        check_fits(model, pool[0].inputs, spec, cfg.model)
        malicious.check(cfg, spec, plans)
        model = model.to(device)
        return lambda plan: model

    def surrogates(self, cfg, pool: list, samples: int, model_name: str) -> list:
        """The dataset's other split (its test split; else the clients after the audited ones)."""
        from ... import data
        from ...errors import FedleakError

        try:
            _, public = data.load(cfg.data, root=cfg.data_root, num_clients=cfg.tune_clients,
                                  samples_per_client=samples, seed=cfg.seed + 1, split="test")
            return public
        except FedleakError:
            _, public = data.load(cfg.data, root=cfg.data_root, num_clients=len(pool) + cfg.tune_clients,
                                  samples_per_client=samples, seed=cfg.seed + 1)
            return public[len(pool):]

    # -- execute ------------------------------------------------------------------------------------
    def score(self, rec, client, spec, *, tokenizer=None, **options) -> dict:
        """PSNR, SSIM, Rec %, IIP, LPIPS, label counts (:func:`fedleak.metrics.images.evaluate_images`)."""
        from ...metrics.images import evaluate_images

        return evaluate_images(rec, client, spec, **options)

    def evaluate(self, rec, truth, spec, model=None, default_model=None) -> dict:
        return self.measure(rec, truth, spec)

    def example(self, rec, truth, spec, scores: dict, model):
        return execute.example(rec, truth, spec, scores)

    def picture(self, rec, truth, spec, scores: dict, count: int):
        """Originals above their matched reconstructions (the metrics' assignment; an original left unmatched
        beside a blank), PSNR under each."""
        import torch

        from ...report import comparison_grid

        order = scores.get("assignment") or []
        originals = spec.denormalize(truth.inputs.detach().cpu().float())
        recs = spec.denormalize(rec.inputs.detach().cpu().float())
        matched = torch.stack([recs[i] if i is not None else torch.zeros_like(originals[0]) for i in order]) \
            if order else recs[: len(originals)]
        count = min(len(originals), count)
        return comparison_grid(originals[:count], matched[:count], psnr=scores.get("psnr_per_input", [])[:count])

    def attack_outputs(self, attack: str, rec, truth, spec, scores: dict, folder) -> str:
        """``comparison.png``: up to 32 originals above their matched reconstructions, PSNR under each."""
        from ...report import save_png

        save_png(self.picture(rec, truth, spec, scores, 32), Path(folder) / "comparison.png")
        return (f"{attack}: PSNR {scores['psnr']:.2f} dB, SSIM {scores['ssim']:.3f}, "
                f"Rec% {scores['rec_percent']:.1f} (> {scores['threshold']} dB)")

    def summarize(self, per_target: list, seconds: float, choice, rec=None) -> dict:
        return execute.summarize(per_target, seconds, choice)

    def verbatim(self, scores: dict) -> int:
        """Images read back verbatim: PSNR above :data:`.execute.VERBATIM_DB` (Fowl et al.: exact copies)."""
        return sum(1 for p in scores["psnr_per_input"] if p is not None and p > execute.VERBATIM_DB)

    tuning_metric = "mean PSNR (dB)"

    def tuning_score(self, rec, truth, spec, model) -> float:
        """A trial's mean PSNR (dB) on one surrogate client."""
        return float(self.measure(rec, truth, spec)["psnr"])

    def tuning_record(self, record: dict) -> dict:
        record.update({"default_psnr": record["default_score"], "best_psnr": record["best_score"]})
        return record

    # -- report -------------------------------------------------------------------------------------
    @property
    def table(self):
        from ...audit.report.tables import IMAGE as table

        return table

    @property
    def how_to_read(self) -> str:
        return report.how_to_read()

    verdict_sentence = staticmethod(report.verdict_sentence)
    imprint_sentence = staticmethod(report.imprint_sentence)
    results_body = staticmethod(report.results_body)

    def make_plots(self, result: dict, examples: list, threat_titles: dict) -> dict:
        return report.make_plots(result, threat_titles)

    # -- outside the audit --------------------------------------------------------------------------
    def truth_scores(self, rec, truth, spec, tokenizer=None) -> dict:
        scores = self.measure(rec, truth.to(rec.inputs.device), spec)
        keep = ("psnr", "ssim", "rec_percent", "iip", "threshold", "psnr_per_input")
        return {k: scores[k] for k in keep if k in scores}


IMAGE = ImageModality()
