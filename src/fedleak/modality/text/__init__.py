"""Text as a modality: ``fedleak audit --data text`` (token sequences for a language model, LoRA or full fine-tuning).

The object :data:`TEXT` gives the audit's shared stages (:mod:`fedleak.audit.run`) what is particular to text:
the model with its tokenizer and task and the text cut for them (:mod:`fedleak.audit.plan.text`), a model per LoRA
rank, the honest server's attacks (DAGER, exact and verified by recomputation, and its continuous variant TIGER:
:data:`fedleak.audit.plan.threats.TEXT_HONEST_ATTACKS`), the metrics (ROUGE-1/2/L, exact sequences:
:mod:`fedleak.metrics.text`), what one recovered item is (a sequence recovered token for token), membership of
candidate documents (:mod:`fedleak.audit.execute.membership`) and the report's section (sequences token by token,
ROUGE plots: :mod:`fedleak.audit.report.text`).
"""

from __future__ import annotations

from ..base import Modality

#: keys that only a text audit (``data: text``) reads, with their unset values
TEXT_ONLY = {"seq_len": None, "lora": None, "lora_warmup": 0, "text_field": "text", "label_field": "label",
             "dropout": "shipped", "lora_dropout": None, "flowertune": False, "membership": None, "candidates": None}


class TextModality(Modality):
    name = "text"
    attack_package = "fedleak.attacks.text"
    items = "sequences"
    default_model = "minilm"  # fedleak.audit.plan.text.DEFAULT_TEXT_MODEL
    recovered_item = "a sequence recovered token for token (padding not scored)"
    options = tuple(TEXT_ONLY)
    malicious_uses_auxiliary = True  # the imprint's bins are fitted to public text

    @property
    def rule(self) -> str:
        from ...audit.judge.verdict import TEXT_RULE

        return TEXT_RULE

    def matches(self, data) -> bool:
        return isinstance(data, str) and data.strip().lower() == "text"

    # -- plan ---------------------------------------------------------------------------------------
    def honest_attacks(self, algorithm: str) -> list:
        from ...audit.plan.threats import text_attacks

        return text_attacks(algorithm)

    def required_exact(self, model, protocol, samples: int) -> list:
        """DAGER for every registered transformer (its precondition, the span test, is decided per update and
        reported)."""
        from ...attacks.base import ATTACKS, ensure_loaded
        from ...audit.plan.threats import TEXT_EXACT_ATTACKS, transformer

        ensure_loaded()
        return [n for n in TEXT_EXACT_ATTACKS if n in ATTACKS and transformer(model)]

    def required_optimization(self, algorithm: str) -> list:
        from ...attacks.base import ATTACKS, ensure_loaded
        from ...audit.plan.threats import TEXT_HONEST_ATTACKS, kind

        ensure_loaded()
        return [n for n in TEXT_HONEST_ATTACKS[algorithm] if n in ATTACKS and kind(n) == "optimization"]

    def accepts_attack(self, module: str) -> bool:
        return module.startswith("fedleak.attacks.text")

    def check_attack_name(self, name: str, text_names: set) -> None:
        if name not in text_names:
            from ...errors import FedleakError

            raise FedleakError(f"--attacks {name}: an image attack; a text audit takes {', '.join(sorted(text_names))}")

    # -- data and model -----------------------------------------------------------------------------
    def prepare(self, cfg, needed: int, samples: int):
        """The model's tokenizer and task decide how the text is cut (:mod:`fedleak.audit.plan.text`)."""
        from ...audit.plan import text as text_plan
        from ...audit.plan.default import DEFAULT_MODEL

        model_name = text_plan.model_name(cfg.model, DEFAULT_MODEL)
        spec, pool, _, _ = text_plan.prepare(cfg, model_name, needed, samples)
        return model_name, spec, pool

    def models(self, cfg, model_name: str, spec, pool: list, plans: list, device, show):
        """The text model at each setting's LoRA rank (built once per rank); the first is built at once (a
        pretrained model loads for minutes — SmolLM2's GGUF — so a line says so before), and the candidate
        documents and the imprint's placement are checked against it before any attack."""
        from ...audit.execute import membership as text_membership
        from ...audit.execute import text as text_steps
        from ...audit.plan import text as text_plan
        from .flowertune import lora_options, micro_batch

        built_models: dict = {}

        def model_for(plan):
            if plan.lora not in built_models:
                built = text_plan.build_model(model_name, spec, seed=cfg.model_seed, lora=plan.lora,
                                              lora_warmup=cfg.lora_warmup, weights=cfg.weights, dropout=cfg.dropout,
                                              lora_dropout=cfg.lora_dropout, **lora_options(cfg))
                built.micro_batch = micro_batch(cfg)
                text_plan.check_fits(built, pool[0].inputs, model_name)
                built_models[plan.lora] = built.to(device)
            return built_models[plan.lora]

        if show is not None:
            show({"stage": f"fedleak audit: loading {model_name} for {spec.name} data (a GGUF file is converted "
                           "on its first load)"})
        model = model_for(plans[0])
        text_membership.check_candidates(cfg, model, spec)  # --candidates against the model, before any attack
        if cfg.malicious:  # the imprint's placement (the token embedding) is checked before any attack runs
            text_steps.imprint_placement(model, spec)
        return model_for

    def outside_pool(self, cfg, model_name: str, needed: int, samples: int):
        from ...audit.execute import membership as text_membership

        return text_membership.outside_pool(cfg, model_name, needed, samples)

    def surrogates(self, cfg, pool: list, samples: int, model_name: str) -> list:
        """The sequences after the audited clients', cut with the model's own tokenizer and task."""
        from ...audit.plan.text import prepare

        _, more, _, _ = prepare(cfg, model_name, len(pool) + cfg.tune_clients, samples)
        return more[len(pool):]

    # -- execute ------------------------------------------------------------------------------------
    def score(self, rec, client, spec, *, tokenizer=None, **options) -> dict:
        """ROUGE-1/2/L, exact sequences, token accuracy (:func:`fedleak.metrics.text.evaluate_text`; ``tokenizer``
        decodes for ROUGE)."""
        from ...metrics.text import evaluate_text

        return evaluate_text(rec, client, spec, tokenizer=tokenizer)

    def evaluate(self, rec, truth, spec, model=None, default_model=None) -> dict:
        """ROUGE and exact sequences, decoded with the attacked model's tokenizer (or its base model's)."""
        tokenizer = getattr(model if model is not None else default_model, "tokenizer", None)
        if tokenizer is None:
            tokenizer = getattr(getattr(model, "base", None), "tokenizer", None)
        return self.measure(rec, truth, spec, tokenizer=tokenizer)

    def attack_outputs(self, attack: str, rec, truth, spec, scores: dict, folder) -> str:
        """No picture: the scores in ``metrics.json`` and the line (ROUGE on token ids: no tokenizer here)."""
        return (f"{attack}: ROUGE-1 {scores['rouge1']:.3f}, ROUGE-L {scores['rougeL']:.3f} (on {scores['rouge_on']}),"
                f" exact sequences {100 * scores['exact_sequences']:.1f} %, token accuracy "
                f"{100 * scores['token_accuracy']:.1f} %")

    def example(self, rec, truth, spec, scores: dict, model):
        from ...audit.execute import text as text_steps

        return text_steps.example(rec, truth, spec, scores, getattr(model, "tokenizer", None))

    def summarize(self, per_target: list, seconds: float, choice, rec=None) -> dict:
        from ...audit.execute import text as text_steps

        exactness = rec.extras.get("exactness") if rec is not None else None
        return text_steps.summarize(per_target, seconds, choice, exactness)

    def judge_base(self, scores: dict):
        """Text is judged by exact sequences (:func:`fedleak.audit.judge.verdict.judge_text`)."""
        from ...audit.judge.verdict import judge_text

        return judge_text(scores)

    def scenario_text(self, text: str, spec) -> str:
        return text.replace("images", f"sequences of {spec.seq_len} tokens")

    def imprint_placement(self, model, spec) -> dict:
        from ...audit.execute import text as text_steps

        return text_steps.imprint_placement(model, spec)

    def verbatim(self, scores: dict) -> int:
        """Sequences recovered token for token."""
        return int(round(scores["exact_sequences"] * scores["num_inputs"]))

    tuning_metric = "100 × exact-sequence share + mean ROUGE-1"

    def tuning_score(self, rec, truth, spec, model) -> float:
        """The share of sequences recovered exactly (× 100) plus the mean ROUGE-1: exact recoveries first, ROUGE-1
        breaking ties."""
        tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "base", None), "tokenizer", None)
        scores = self.measure(rec, truth, spec, tokenizer=tokenizer)
        return 100.0 * float(scores["exact_sequences"] or 0.0) + float(scores["rouge1"] or 0.0)

    # -- run results --------------------------------------------------------------------------------
    def point_extras(self, cfg, model, spec, pool, outside, plan, show, data: dict) -> None:
        """The LoRA rank, sequence length, trainable parameters and training of the point; membership of
        candidate documents when asked (a finding of the honest server: its verdict and evidence)."""
        from ...audit.execute import membership as text_membership
        from ...audit.judge import membership as judge_membership

        data["settings"].update({"lora": plan.lora, "seq_len": spec.seq_len,
                                 "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
                                 "training": text_membership.training(model, cfg)})
        if text_membership.wanted(cfg):
            data["membership"] = text_membership.measure_point(cfg, model, spec, pool, outside, plan, show)
            judge_membership.fold(data)

    def weights_note(self, cfg, model_name: str):
        from ...audit.plan import text as text_plan

        return None if cfg.weights else text_plan.weights_note(model_name)

    def result_entries(self, cfg, points: list) -> dict:
        from ...audit.execute import membership as text_membership

        return text_membership.result_entries(cfg, points)

    def cautions(self, points: list, sweep, plans: list) -> list:
        """A low verdict where the exact attacks could not decide is no protection."""
        undecided = [p["value"] for p in points if p["threat_models"]["honest-but-curious"].get("condition_failed")
                     and p["threat_models"]["honest-but-curious"]["verdict"] != "high"]
        if not undecided:
            return []
        where = f" at {sweep.label(plans[0].defense)} = {', '.join(f'{v:g}' for v in undecided)}" if sweep else ""
        return [f"Caution{where}: the exact text attacks' precondition failed (too many token inputs for the "
                f"span limit — layer width or LoRA rank — or noise filling the span), so they could not decide; "
                f"a lower verdict there is no evidence that the text is protected."]

    # -- report -------------------------------------------------------------------------------------
    @property
    def table(self):
        from ...audit.report.tables import TEXT as table

        return table

    @property
    def css(self) -> str:
        from ...audit.report.text import CSS

        return CSS

    @property
    def how_to_read(self) -> str:
        from ...audit.report.text import HOW_TO_READ

        return HOW_TO_READ

    def verdict_sentence(self, title: str, tm: dict, prefix: bool = True, quick: bool = False) -> str:
        from ...audit.report import text as text_report

        return text_report.verdict_sentence(title, tm, prefix)

    def imprint_sentence(self, mal: dict) -> str:
        from ...audit.report import text as text_report

        return text_report.imprint_sentence(mal)

    def results_body(self, point: dict, examples: dict) -> list:
        from ...audit.report import text as text_report

        return text_report.results_body(point, examples)

    def make_plots(self, result: dict, examples: list, threat_titles: dict) -> dict:
        from ...audit.report import text as text_report

        return text_report.make_plots(result, threat_titles)

    # -- outside the audit --------------------------------------------------------------------------
    def truth_shape_ok(self, inputs, spec) -> bool:
        return True  # token sequences: their length is the spec's seq_len, checked by the model

    truth_dtype = "integer (token ids)"

    def truth_dtype_ok(self, inputs) -> bool:
        return not (inputs.is_floating_point() or inputs.is_complex()) and str(inputs.dtype) != "torch.bool"

    def labels_are_classes(self) -> bool:
        return False  # next-token targets, not classes

    def truth_scores(self, rec, truth, spec, tokenizer=None) -> dict:
        scores = self.measure(rec, truth.to(rec.inputs.device), spec, tokenizer=tokenizer)
        keep = ("rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy", "rec_percent")
        return {k: scores[k] for k in keep if k in scores}

    def recovered_text(self, records: list) -> str:
        from ..recovered import latest_texts

        return latest_texts(records)


TEXT = TextModality()
