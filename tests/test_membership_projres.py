"""Membership of candidate documents (issue 45): ProjRes beside the joint fit, the client's AdamW, held-back
non-members, the AUC's interval, and membership as a finding of the honest server (issue 46, item 2).

Small config-built LLaMA models (``llama-tiny``: 2 layers, width 128) with PEFT LoRA; every AUC asserted is the
one measured on the fixed seed (stated beside each assertion)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

from fedleak import data, models
from fedleak.errors import FedleakError
from fedleak.fl.client import client_update
from fedleak.metrics.membership import auc_interval, membership_metrics
from fedleak.types import ClientData, Protocol

pytest.importorskip("transformers")
pytest.importorskip("peft")


# -- the client's optimizer as deployed --------------------------------------------------------------
def test_adamw_client_update_is_torch_adamw():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    x, y = torch.randn(12, 5), torch.randint(0, 3, (12,))
    update = client_update(model, ClientData(x, y, "c"), Protocol("fedavg", 2, 4, 0.01, False, optimizer="adamw"))
    ref = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.0)
    for _ in range(2):
        for b in torch.arange(12).split(4):
            opt.zero_grad()
            nn.functional.cross_entropy(ref(x[b]), y[b]).backward()
            opt.step()
    assert all(torch.allclose(update.client_params[k], v, atol=1e-6) for k, v in ref.named_parameters())
    sgd = client_update(model, ClientData(x, y, "c"), Protocol("fedavg", 2, 4, 0.01, False))
    assert not torch.allclose(sgd.client_params["0.weight"], update.client_params["0.weight"])


def test_protocol_optimizer_in_json_only_when_not_sgd():
    assert "optimizer" not in Protocol("fedavg").to_json()  # saved updates and job hashes unchanged
    adam = Protocol("fedavg", optimizer="adamw")
    assert Protocol.from_json(adam.to_json()) == adam
    with pytest.raises(FedleakError, match="unknown optimizer 'adam'; allowed: sgd, adamw"):
        Protocol("fedavg", optimizer="adam")


# -- the AUC's interval ------------------------------------------------------------------------------
def test_delong_interval_by_hand():
    """Members 3, 1; non-members 2, 0: AUC 3/4; V10 = (1, ½), V01 = (½, 1); var = 0.125/2 + 0.125/2."""
    low, high = auc_interval([3, 2, 1, 0], [True, False, True, False])
    half = 1.959964 * 0.125 ** 0.5
    assert low == pytest.approx(0.75 - half, abs=1e-5) and high == 1.0
    m = membership_metrics([3, 2, 1, 0], [True, False, True, False])
    assert m["auc"] == 0.75 and m["auc_ci95"] == [pytest.approx(0.75 - half, abs=1e-5), 1.0]


# -- ProjRes on small config-built models ---------------------------------------------------------------
def _scores(lora: int, algorithm: str, batch: int, n: int, seq_len: int, optimizer: str, lr: float,
            joint_fit: bool = True):
    from fedleak.attacks.text.membership import membership_scores
    from fedleak.attacks.text.projres import projres_scores

    spec, clients = data.load("text", num_clients=1, samples_per_client=2 * n, seq_len=seq_len, task="causal-lm",
                              seed=0)
    c = clients[0]
    options = {"lora": lora, "lora_dropout": 0.075, "lora_targets": "peft"} if lora else {}
    model = models.build("llama-tiny", spec, seed=0, **options)
    update = client_update(model, ClientData(c.inputs[:n], c.labels[:n], "v"),
                           Protocol(algorithm, 1, batch, lr, optimizer=optimizer), seed=0)
    members = [True] * n + [False] * n  # the other n sequences of the same shuffled pool: held back
    proj = projres_scores(model, update, c.inputs)
    joint = membership_metrics(membership_scores(model, update, c.inputs, None)["scores"], members) if joint_fit else None
    return membership_metrics(proj["scores"], members), joint, proj


@pytest.mark.slow  # ~18 CPU-s: the full model's gradient SVD per layer and 32 candidates' forward passes
def test_projres_full_fine_tuning_fedsgd_members_lie_in_the_span():
    """FedSGD, 16 × 8 tokens into width 128: each layer's gradient rows span the step's inputs (rank < 128), a
    member's embeddings lie in it, a non-member's do not: every member above every non-member (measured 1.0)."""
    proj, _, got = _scores(0, "fedsgd", 16, 16, 8, "sgd", 1e-3, joint_fit=False)
    assert proj["auc"] == 1.0 and proj["tpr_at_1pct_fpr"] == 1.0
    assert got["subspace"]["full_rank_layers"] == 0 and max(got["subspace"]["ranks"]) < 128


@pytest.mark.slow  # ~24 CPU-s: two FedAvg clients of full fine-tuning, 64 candidates each
def test_projres_full_fine_tuning_fedavg_sgd_and_adamw():
    """FedAvg, 4 local steps of 8 × 8 tokens: the update's rows are full rank in most layers (top 25 % of
    directions kept). SGD: ProjRes AUC 0.969 (measured); AdamW, whose elementwise step is no combination of
    input rows: 0.784 (measured; the joint fit reaches 0.896 there, not run here to keep the test short)."""
    proj, _, got = _scores(0, "fedavg", 8, 32, 8, "sgd", 1e-3, joint_fit=False)
    assert proj["auc"] >= 0.95
    assert got["subspace"]["full_rank_layers"] > 0
    proj, _, _ = _scores(0, "fedavg", 8, 32, 8, "adamw", 1e-3, joint_fit=False)
    assert 0.75 <= proj["auc"] <= 0.82


@pytest.mark.slow  # ~35 CPU-s: the joint fit's 80 candidate gradients beside ProjRes
def test_projres_on_lora_adapters_under_flowertune_client():
    """FlowerTune's client shape scaled down: LoRA r 8 with dropout 0.075 on PEFT's targets, AdamW at lr 5e-5, 10
    local steps of 4 × 16 tokens, 40 members and 40 held-back non-members. ProjRes reads the adapters' A updates
    (rank 8 of 128): AUC 0.738 (measured); the joint fit 0.918."""
    proj, joint, got = _scores(8, "fedavg", 4, 40, 16, "adamw", 5e-5)
    assert got["subspace"]["layers"] == 4 and got["subspace"]["ranks"] == [8]
    assert 0.70 <= proj["auc"] <= 0.78
    assert joint["auc"] >= 0.9 and joint["tpr_at_1pct_fpr"] >= 0.5


# -- the joint fit in the client's AdamW metric ---------------------------------------------------------------
def test_adam_scale_and_fit_by_hand():
    """r = sqrt(mu^2 + sigma^2/b) per coordinate (0 where no candidate moves it); under SGD the fit is the joint fit;
    a coordinate subset keeps every candidate's coordinates aligned."""
    from fedleak.attacks.text.adam_fit import adam_scale, coordinates, fit_scores
    from fedleak.attacks.text.membership import joint_fit

    g = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    scale = adam_scale(g, batch=2)  # mu = (2, 0, 2), sigma^2 = (2, 0, 0)
    assert torch.allclose(scale, torch.tensor([1 / 5 ** 0.5, 0.0, 0.5], dtype=torch.float64))
    grads, delta = torch.randn(5, 40, generator=torch.Generator().manual_seed(0)), torch.randn(40)
    assert torch.equal(fit_scores(grads, delta, "sgd", 4), joint_fit(grads, delta))
    assert not torch.allclose(fit_scores(grads, delta, "adamw", 4), joint_fit(grads, delta))
    assert coordinates(100, 9, seed=0, limit=10_000) is None
    keep = coordinates(100_000, 9, seed=0, limit=100_000)
    assert keep.numel() == 10_000 and torch.equal(keep, keep.sort().values) and keep.unique().numel() == 10_000
    assert torch.equal(keep, coordinates(100_000, 9, seed=0, limit=100_000))


def test_adam_fit_beats_the_joint_fit_under_the_flowertune_client():
    """FlowerTune's client scaled to llama-tiny (LoRA r 8, dropout 0.075, AdamW lr 5e-5, 10 local steps of 4 × 16
    tokens), 40 members and 40 held-back non-members, seed 0: the fit in AdamW's metric reaches AUC 0.953 and 45 %
    of members at 1 % FPR (measured); the plain joint fit on the same gradients 0.918 (measured). At 10 steps of
    16, two clients pooled (320 + 320): 0.931 and 0.958 on seeds 0 and 1, 0.926 on a held-back corpus, against the
    joint fit's 0.848, 0.838, 0.820 (benchmarks/results/membership_tiny.json)."""
    from fedleak.attacks.text.adam_fit import adam_fit_scores

    n = 40
    spec, clients = data.load("text", num_clients=1, samples_per_client=2 * n, seq_len=16, task="causal-lm", seed=0)
    c = clients[0]
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_dropout=0.075, lora_targets="peft")
    update = client_update(model, ClientData(c.inputs[:n], c.labels[:n], "v"),
                           Protocol("fedavg", 1, 4, 5e-5, optimizer="adamw"), seed=0)
    got = adam_fit_scores(model, update, c.inputs)
    members = [True] * n + [False] * n
    adam, joint = membership_metrics(got["scores"], members), membership_metrics(got["joint"], members)
    assert got["optimizer"] == "adamw" and got["batch"] == 4 and got["kept"] == got["parameters"]
    lora_a = sum(v.numel() for k, v in update.server_params.items() if ".lora_A." in k)
    assert got["silent"] == lora_a  # round 1: B = 0, so no candidate's gradient moves A (the update's A moved)
    assert all(update.delta()[k].abs().max() > 0 for k in update.server_params if ".lora_A." in k)
    assert adam["auc"] == pytest.approx(0.953, abs=0.01) and adam["tpr_at_1pct_fpr"] >= 0.4
    assert joint["auc"] == pytest.approx(0.918, abs=0.01) and adam["auc"] > joint["auc"] + 0.02
    with pytest.raises(FedleakError, match="adam-fit needs at least 2 candidate sequences"):
        adam_fit_scores(model, update, c.inputs[:1])


def test_projres_needs_candidates_and_layers():
    from fedleak.attacks.text.projres import projres_scores

    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=1e-3))
    with pytest.raises(FedleakError, match="at least 2 candidate sequences"):
        projres_scores(model, update, clients[0].inputs[:1])


def test_membership_attacks_are_listed(capsys):
    from fedleak.cli import main

    assert main(["attacks"]) == 0
    out = capsys.readouterr().out
    assert "membership attacks" in out and "  projres " in out and "  joint-fit " in out and "  adam-fit " in out


# -- non-members held back from the same source ----------------------------------------------------------
def test_non_members_are_held_back_from_the_clients_own_file(tmp_path):
    """A folder of three files (one per client): the non-members come from the audited client's file, sequences
    no audited client trains on — never another file's topic."""
    from fedleak.audit.execute.membership import build_candidates, held_back
    from fedleak.data.tokenized import load

    words = {"rivers": "river bank water flow delta stream", "stars": "star orbit light galaxy comet planet",
             "bread": "flour yeast oven crust dough bake"}
    for name, vocab in words.items():
        (tmp_path / f"{name}.txt").write_text(" ".join(f"{w}{i % 7}" for i in range(400) for w in vocab.split()),
                                              encoding="utf-8")
    _, pool = load(tmp_path, num_clients=2, samples_per_client=6, seq_len=8, task="causal-lm")
    _, whole = load(tmp_path, num_clients=1, samples_per_client=None, seq_len=8, task="causal-lm")
    source = whole[0]
    assert torch.equal(source.inputs[:6], pool[0].inputs)  # the same seed and cut: client 0's file in full
    victim, ids, _, members = build_candidates(pool[0], source, 12, seed=0, audited=pool)
    file_rows = {tuple(r) for r in source.inputs.tolist()}
    used = {tuple(r) for c in pool for r in c.inputs.tolist()}
    outsiders = [tuple(r) for r in ids[~members].tolist()]
    assert len(outsiders) == 6 and all(r in file_rows and r not in used for r in outsiders)
    assert all(tuple(r) in {tuple(x) for x in victim.inputs.tolist()} for r in ids[members].tolist())
    with pytest.raises(FedleakError, match="held back from the audited client's data source"):
        held_back(source, pool, len(source), seed=0)


# -- the audit: membership reaches the honest server's verdict, console and summary ------------------------
def _audit(tmp_path, *extra):
    from fedleak.cli import main

    out = tmp_path / "out"
    code = main(["audit", "--data", "text", "--model", "llama-tiny", "--flowertune", "--seq-len", "16",
                 "--samples", "40", "--batch-size", "4", "--lora", "8", "--out", str(out), *extra])
    return code, out


def test_flowertune_audit_states_membership_in_the_verdict(tmp_path, capsys):
    """FlowerTune-shaped (LoRA r 8, dropout 0.075, AdamW, 10 local steps of 4 × 16 tokens), 40 members and 40
    held-back non-members: DAGER's condition fails (inconclusive by reconstruction), the membership test measures
    a leak (measured at this seed: joint fit AUC 0.934, 95 % CI 0.88–0.99, 80 % of members at 1 % FPR; ProjRes
    0.778) and it decides the honest server's verdict: medium, since 40 non-members do not resolve 1 % FPR."""
    code, out = _audit(tmp_path, "--membership", "80")
    assert code == 0
    console = capsys.readouterr().out
    result = json.loads((out / "metrics.json").read_text())
    m = result["membership"]
    assert m["members"] == 40 and m["non_members"] == 40 and m["optimizer"] == "adamw"
    assert set(m["attacks"]) == {"projres", "joint-fit", "adam-fit"} and m["auc_ci95"][0] > 0.5
    assert m["auc"] >= 0.9 and "held back" in m["split"]
    honest = result["threat_models"]["honest-but-curious"]
    assert m["attacks"]["joint-fit"]["auc"] >= 0.9 and m["attacks"]["projres"]["auc"] >= 0.7
    assert honest["membership"]["level"] == "medium" and honest["verdict_by"] == "membership"
    assert honest["verdict"] == honest["membership"]["level"] and honest["reconstruction_verdict"] == "inconclusive"
    assert honest["evidence"] == "estimated" and "membership" in honest["evidence_text"]
    assert "left out by --attacks" not in honest["evidence_text"]  # no --attacks was given: the preset chose
    assert "left out by the FlowerTune preset" in honest["evidence_text"]
    assert f"Honest-but-curious server: {honest['verdict'].upper()} leakage" in console
    assert "Membership of candidate documents: membership" in console
    assert result["flowertune"]["optimizer"].startswith("adamw")
    from fedleak.audit.judge.overall import overall

    line = overall(result)["line"]
    assert f"honest: {honest['verdict']}" in line and "membership: " in line


@pytest.mark.parametrize("lines, extra, needle", [
    (["one document here", "two documents here", "three"], ["--membership", "8"],
     "the file holds 3 documents, --membership asks for 8"),
    (["a b c d e f g h i j", "a b c d e f g h i j k l", "other words entirely"], [],
     "are the same in their first 8 tokens"),
    ([" ".join(["word"] * 2100), "short one", "another short one"], [], "longer than the model's context"),
])
def test_bad_candidate_files_are_one_line(tmp_path, capsys, lines, extra, needle):
    from fedleak.cli import main

    path = tmp_path / "docs.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = sorted(os.listdir(tmp_path))
    code = main(["audit", "--data", "text", "--model", "llama-tiny", "--seq-len", "8", "--samples", "4",
                 "--candidates", str(path), "--algorithm", "fedavg", "--attacks", "dager", "--no-malicious", "--quiet",
                 "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == before


def test_preset_candidates_shrink_to_what_the_text_holds():
    """--flowertune asks 400 candidates (200 + 200 where the text allows); at 512 tokens the embedded text holds 96
    windows beside an 8-sequence client: 8 members and 96 held back, said in the preset's description. A
    --membership the user gave is never shrunk: too few is one line."""
    from fedleak.audit.execute.membership import outside_pool
    from fedleak.audit.plan.config import AuditConfig

    cfg = AuditConfig(data="text", model="llama-tiny", seq_len=512, membership=400)
    cfg.extra["flowertune"] = {"candidates_by": "the preset"}
    source = outside_pool(cfg, "llama-tiny", 1, 8)
    assert len(source) == 104 and cfg.extra["membership_count"] == 104
    assert cfg.extra["flowertune"]["candidates"].startswith("104 candidates, not the preset's 400")
    given = AuditConfig(data="text", model="llama-tiny", seq_len=512, membership=400)
    given.extra["flowertune"] = {"candidates_by": "--membership"}
    with pytest.raises(FedleakError, match="--membership 400: the audited client's data source holds about 96"):
        outside_pool(given, "llama-tiny", 1, 8)


@pytest.mark.slow  # ~25 CPU-s: three AdamW client updates of 10 steps and their ProjRes scores
def test_membership_client_update_goes_through_flowers_dp_wrappers():
    """The membership test's client update passes through the audit's defense. Flower's central DP noises the
    aggregate after the server saw the clipped update: ProjRes scores exactly as without it (0.729 measured);
    Flower's local DP at ε 1 (client noise) brings it to 0.540 (measured; benchmarks/results/membership_dp.json)."""
    from fedleak.audit.execute.membership import measure
    from fedleak.fl.update_filters import UpdateFilter

    n = 40
    spec, pool = data.load("text", num_clients=1, samples_per_client=2 * n + 8, seq_len=16, task="causal-lm", seed=0)
    c = pool[0]
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_dropout=0.075, lora_targets="peft")
    victim, outside = ClientData(c.inputs[:n], c.labels[:n], "client"), ClientData(c.inputs[n:], c.labels[n:], "out")
    protocol = Protocol("fedavg", 1, 4, 5e-5, optimizer="adamw")
    auc = {}
    for name, spec_text in (("none", None), ("central", "flower-central-dp:noise=10,clip=0.001,clients=10"),
                            ("local", "flower-local-dp:clip=0.001,sensitivity=0.001,epsilon=1,delta=1e-5")):
        entry = measure(model, victim, outside, protocol, count=2 * n, seed=0, spec=spec, statistics=("projres",),
                        defense=UpdateFilter.parse(spec_text) if spec_text else None)
        auc[name] = entry["auc"]
        if spec_text:
            assert entry["defense"]["kind"] == spec_text.split(":")[0]
    assert auc["central"] == auc["none"] == pytest.approx(0.729, abs=1e-3)
    assert auc["local"] == pytest.approx(0.540, abs=1e-3)
