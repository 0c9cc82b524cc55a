"""Option combinations of an audit that cannot work, refused when the config is made (before any work).

A knob the audit would not turn — ``--lora``, ``--lora-warmup``, ``--seq-len``, ``--text-field``,
``--label-field``, ``--dropout``, ``--lora-dropout``, ``--flowertune``, ``--membership``, ``--candidates``
or ``--sweep lora=…`` on images — would label a report with a setting that changed nothing; an image
attack named for a text audit (or a text attack for images) would fail deep inside
the attack (``KeyError: 'hf.lm_head.weight'``). Both are one :class:`~fedleak.errors.FedleakError` line.
"""

from __future__ import annotations

from typing import Optional

from ...errors import FedleakError, unknown_choice
from ...modality.text import TEXT_ONLY  # noqa: F401  (keys only a text audit reads, with their unset values)
from . import threats


def check_combinations(cfg, sweep: Optional[object]) -> None:
    """Option combinations that cannot work, refused before any work: a knob the audit would not turn
    (``--lora`` or ``--sweep lora=`` on images) and attacks of the other modality (image attacks on text).

    ``cfg`` is the :class:`.config.AuditConfig` being made and ``sweep`` its parsed :class:`.config.Sweep` (or
    ``None``); named in words, not imported, since ``config`` calls this while it is made (no import circle)."""
    from .model_loading import check_model

    from ...modality import of as modality_of

    check_model(cfg.model, cfg.weights, load=False)  # name, folder, GGUF, factory, weights: before any data
    modality = modality_of(cfg.data)
    own = modality.options  # the options a modality object takes (text: all of TEXT_ONLY; a table: its label)
    given = [k for k, unset in TEXT_ONLY.items() if getattr(cfg, k) != unset and k not in own]
    if given:
        raise FedleakError(f"--{given[0].replace('_', '-')} applies to text audits only (--data text); "
                           f"this audit is of {cfg.data!r} {modality.items}")
    lora_swept = sweep is not None and getattr(sweep, "knob", None) == "lora"
    if lora_swept and "lora" not in own:
        raise FedleakError(f"--sweep lora=... applies to text audits only (--data text); this audit is of "
                           f"{cfg.data!r} {modality.items}, where LoRA changes nothing")
    if cfg.lora_dropout is not None and cfg.lora is None and not cfg.flowertune and not lora_swept:
        raise FedleakError(f"--lora-dropout {cfg.lora_dropout:g} is PEFT's adapter dropout: it needs --lora R (or "
                           "--flowertune); without an adapter it would change nothing")
    if cfg.candidates:  # the file is read (and refused) when the config is made, not when the run reaches it
        from .candidates import read_candidates

        read_candidates(cfg.candidates)
    if cfg.attacks:
        from ...attacks.base import ATTACKS, ensure_loaded

        ensure_loaded()
        for name in cfg.attacks:
            if name not in ATTACKS:
                raise unknown_choice("attack (--attacks)", name, ATTACKS)
        honest = [n for n in cfg.attacks if n not in threats.MALICIOUS_NAMES]
        wrong = [n for n in honest if not modality.accepts_attack(ATTACKS[n].cls.__module__)]
        if wrong:
            from ...modality import attack_owner

            kind = attack_owner(ATTACKS[wrong[0]].cls.__module__).name
            fits = sorted(n for n, e in ATTACKS.items() if modality.accepts_attack(e.cls.__module__))
            raise FedleakError(f"--attacks {wrong[0]} is an {kind} attack; this audit is of "
                               f"{modality.items}: use {', '.join(fits[:12])}")


def check_plans(cfg, plans: list) -> None:
    """Option combinations that cannot run, refused before any work (one line each; issue 27)."""
    lora = any(p.lora for p in plans)
    if lora and cfg.malicious:
        raise FedleakError("--lora with the malicious threat model: the imprint block reads tokens through the "
                           "embedding table, which a LoRA update does not carry; add --no-malicious")
    from ...modality import of as modality_of

    modality = modality_of(cfg.data)
    if lora and "lora" not in modality.options:
        raise FedleakError("--lora applies to language models (--data text)")
    text_names = set(threats.TEXT_BUDGETS) | set(threats.TEXT_EXACT_ATTACKS) | set(threats.TEXT_HONEST_ATTACKS["fedsgd"])
    for name in cfg.attacks or ():
        if name not in threats.MALICIOUS_NAMES:
            modality.check_attack_name(name, text_names)
