"""Modalities as values (issue 44 item 6): the audit's stages, the Flower integration, the metrics' entry and the
workflows hold no modality branch — they ask the data's modality object (:mod:`fedleak.modality`)."""

import re
from pathlib import Path

import pytest

from fedleak.errors import FedleakError
from fedleak.modality import IMAGE, TABULAR, TEXT, attack_owner, named, of

SRC = Path(__file__).resolve().parents[1] / "src" / "fedleak"
#: where no modality branch may live (the modality package itself knows its own kind)
STAGES = [SRC / "audit", SRC / "integrations", SRC / "metrics" / "evaluate.py", SRC / "workflows.py"]
#: what a modality branch looks like: a kind test (``is_text``), a comparison with a modality's name, a text flag
#: read off a context (``auditor.text``) or passed on (``text=is_text``); a module path (``fedleak.attacks.text``)
#: or a call such as matplotlib's ``ax.text(...)`` is no branch
BRANCH = re.compile(r"is_text|modality\W{0,3}\s*(==|!=|\bin\b)|(==|!=)\s*[\"'](image|text|tabular)[\"']"
                    r"|[\"'](image|text|tabular)[\"']\s*(==|!=)|\b(self|auditor|context|ctx)\.text\b(?!\s*\()"
                    r"|\btext\s*=\s*(is_text|self\.text|auditor\.text|text)\b")


def _files():
    for root in STAGES:
        yield from ([root] if root.is_file() else sorted(root.rglob("*.py")))


def test_no_modality_branch_in_the_stages():
    found = [f"{path.relative_to(SRC)}:{n}: {line.strip()}" for path in _files()
             for n, line in enumerate(path.read_text().splitlines(), 1) if BRANCH.search(line)]
    assert found == [], "modality branches (ask fedleak.modality instead):\n" + "\n".join(found)


def test_the_pattern_finds_the_branches_it_forbids():
    for line in ('if getattr(spec, "modality", "image") == "text":', "text = is_text(cfg.data)",
                 "found += verbatim(scores, auditor.text)", 'if task == "text":', "spec.modality != 'text'"):
        assert BRANCH.search(line), line
    for line in ('ax.text(0.5, 0.5, "x")', "from ...attacks.text.projres import projres_scores",
                 'subprocess.run(command, text=True)'):
        assert not BRANCH.search(line), line


def test_data_names_and_spec_names_give_one_object():
    assert of("digits") is IMAGE and of("cifar10") is IMAGE and of(None) is IMAGE
    assert of(" Text ") is TEXT and of("adult") is TABULAR and of("x/my.CSV") is TABULAR
    assert named("text") is TEXT and named({"modality": "tabular"}) is TABULAR and named(None) is IMAGE
    assert named({"verdict": "high"}) is IMAGE  # an image result's records carry no modality key


def test_each_modality_says_its_attacks_and_items():
    assert IMAGE.honest_attacks("fedsgd") == ["inverting-gradients"]
    assert TEXT.required_optimization("fedsgd") == ["tiger"]
    assert attack_owner("fedleak.attacks.text.dager") is TEXT and attack_owner("fedleak.attacks.spear") is IMAGE
    assert attack_owner("fedleak.attacks.tabular.tableak") is TABULAR
    assert TEXT.verbatim({"exact_sequences": 0.5, "num_inputs": 4}) == 2
    assert IMAGE.verbatim({"psnr_per_input": [70.0, 12.0, None]}) == 1
    with pytest.raises(FedleakError, match="a text attack; it needs --data text"):
        IMAGE.check_attack_name("dager", {"dager", "tiger"})
    with pytest.raises(FedleakError, match="an image attack; a text audit takes"):
        TEXT.check_attack_name("inverting-gradients", {"dager", "tiger"})


def test_a_text_only_option_on_records_names_the_records():
    from fedleak.audit.plan.config import AuditConfig

    with pytest.raises(FedleakError, match=r"--seq-len applies to text audits only .* 'adult' records"):
        AuditConfig.from_mapping({"data": "adult", "seq_len": 8})
