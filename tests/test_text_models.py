"""Language models (models/hf), text data (data/tokenized, text_files) and text metrics (metrics/text)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from fedleak import data, metrics, models
from fedleak.errors import FedleakError
from fedleak.fl.client import client_update
from fedleak.models.hf import HFTextModel
from fedleak.models.hf.lora import adapter_state, params_from_adapter_state
from fedleak.types import DataSpec, Protocol, Reconstruction
from fedleak.types.params import check_update, params_of

pytest.importorskip("transformers")
pytest.importorskip("peft")

TEXT = ("Federated learning trains a shared model on data that never leaves the clients. The server sends "
        "weights, every client computes an update on its own text and sends it back. ") * 6


@pytest.fixture(scope="module")
def lm_data():
    return data.load("text", num_clients=2, samples_per_client=2, seq_len=8, task="causal-lm")


@pytest.fixture(scope="module")
def cls_data():
    return data.load("text", num_clients=1, samples_per_client=2, seq_len=10, task="classification")


@pytest.fixture(scope="module")
def minilm_model(cls_data):
    return models.build("minilm", cls_data[0], seed=0)


def test_spec_json_roundtrip_and_old_specs():
    spec = DataSpec("t", (1, 1, 8), 30522, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    assert DataSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    old = {"name": "x", "shape": [1, 28, 28], "num_classes": 10, "mean": [0.5], "std": [0.5]}
    assert DataSpec.from_json(old).modality == "image"
    with pytest.raises(FedleakError, match="modality"):
        DataSpec("t", (1, 1, 8), 2, (0.0,), (1.0,), modality="audio")


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_config_models_build_fast_and_train(name, lm_data):
    spec, clients = lm_data
    start = time.process_time()  # CPU seconds: the shared test machine's load does not count
    model = models.build(name, spec, seed=3)
    assert time.process_time() - start < 5.0 or name == "gpt2-tiny"  # the first build also imports transformers
    assert isinstance(model, HFTextModel) and model.task == "causal-lm" and model.pad_id == 0
    assert clients[0].inputs.dtype == torch.int64 and spec.vocab_size == spec.num_classes == 30522
    again = models.build(name, spec, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(params_of(model).values(), params_of(again).values()))
    sgd = client_update(model, clients[0], Protocol("fedsgd", lr=0.1))
    check_update(sgd, model)
    assert all(bool(torch.isfinite(g).all()) for g in sgd.gradient.values())
    # the loss is the model's next-token loss: the gradient matches a direct backward of loss_fn
    model.zero_grad()
    model.loss_fn(model(clients[0].inputs), clients[0].labels).backward()
    name0 = next(iter(sgd.gradient))
    assert torch.allclose(dict(model.named_parameters())[name0].grad, sgd.gradient[name0], atol=1e-5)
    avg = client_update(model, clients[0], Protocol("fedavg", epochs=1, batch_size=1, lr=0.05))
    moved = sum(float((avg.client_params[k] - avg.server_params[k]).abs().sum()) for k in avg.server_params)
    assert moved > 0


def test_lora_update_holds_only_adapters(lm_data):
    spec, clients = lm_data
    model = models.build("gpt2-tiny", spec, seed=0, lora=4)
    assert model.lora_rank == 4
    update = client_update(model, clients[0], Protocol("fedavg", epochs=1, batch_size=2, lr=0.1))
    assert update.server_params and all("lora_" in k for k in update.server_params)
    for key in update.server_params:
        delta = float((update.client_params[key] - update.server_params[key]).abs().max())
        if "lora_B" in key:  # round 1: B = 0 moves, A stays (its gradient is B^T ... = 0)
            assert float(update.server_params[key].abs().max()) == 0 and delta > 0
        else:
            assert delta == 0
    state = adapter_state(model, update.client_params)
    assert all(k.startswith("base_model.model.") and ".default." not in k for k in state)
    back = params_from_adapter_state(model, state)
    assert all(torch.equal(back[k], update.client_params[k]) for k in back)


def test_lora_warmup_gives_nonzero_b(lm_data):
    spec, _ = lm_data
    model = models.build("llama-tiny", spec, seed=0, lora=2, lora_warmup=2)
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert b and all(float(p.detach().abs().max()) > 0 for p in b)
    with pytest.raises(FedleakError, match="lora_warmup"):
        models.build("llama-tiny", spec, lora_warmup=2)


def test_minilm_offline_classifier(minilm_model, cls_data):
    spec, clients = cls_data
    model = minilm_model
    assert model.task == "classification" and model.vocab_size == 30522
    assert sum(p.numel() for p in model.hf.bert.parameters()) > 22_000_000
    assert clients[0].inputs[0, 0].item() == 101  # [CLS]
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.1))
    assert set(update.gradient) == set(params_of(model))


def test_text_loader_files_and_bad_inputs(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "b.txt").write_text(TEXT.upper(), encoding="utf-8")
    spec, clients = data.load("text", tmp_path, num_clients=5, samples_per_client=None, seq_len=16,
                              task="classification")
    assert len(clients) == 2 and spec.num_classes == 2 and spec.shape == (1, 1, 16)
    assert {int(c.labels[0]) for c in clients} == {0, 1}
    rows = [{"text": "a short record", "label": 1}, {"text": "another one here", "label": 3}]
    jsonl = tmp_path / "j" / "d.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    spec, clients = data.load("text", jsonl, num_clients=1, samples_per_client=2, seq_len=8)
    assert spec.num_classes == 4 and sorted(clients[0].labels.tolist()) == [1, 3]
    assert (clients[0].inputs == spec.pad_id).any()  # short records are padded

    def fails(root, match, **options):
        with pytest.raises(FedleakError, match=match) as info:
            data.load("text", root, num_clients=1, samples_per_client=1, **options)
        assert "\n" not in str(info.value)

    short = tmp_path / "short.txt"
    short.write_text("too short", encoding="utf-8")
    fails(short, "shorter than one sequence", seq_len=16, task="causal-lm")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc\x00\x01")
    fails(binary, "binary")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9 ".encode("latin-1") * 20)
    fails(latin, "UTF-8")
    fails(jsonl, "field 'body'", text_field="body")
    badlabel = tmp_path / "bad.jsonl"
    badlabel.write_text(json.dumps({"text": "x y z", "label": "pos"}), encoding="utf-8")
    fails(badlabel, "label field 'label' must be an integer")
    fails(badlabel, "label field 'y'", label_field="y")


def test_model_folder_refusals(tmp_path, minilm_model):
    fails = lambda match: pytest.raises(FedleakError, match=match)  # noqa: E731
    spec = DataSpec("t", (1, 1, 8), 2, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    with fails("no config.json"):
        models.build(str(tmp_path), spec)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with fails("no \\*.safetensors"):
        models.build(str(tmp_path), spec)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": {"AutoModel": "x.Y"}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with fails("remote code"):
        models.build(str(tmp_path), spec)
    # a tokenizer larger than the model's vocabulary: save a tiny BERT with 100 embeddings + MiniLM's tokenizer
    import shutil

    from fedleak.data.tokenizers import minilm_path
    from fedleak.models.hf.builders import transformers_module

    tf = transformers_module()
    folder = tmp_path / "small"
    tf.BertForSequenceClassification(tf.BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=8)).save_pretrained(folder)
    shutil.copy(minilm_path() / "tokenizer.json", folder / "tokenizer.json")
    with fails("tokenizer.json has 30522 tokens but the model embeds only 100"):
        models.build(str(folder), spec)


def test_rouge_and_exact_on_fixed_sequences():
    truth = torch.tensor([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
    rec = torch.tensor([[9, 10, 11, 12, 13, 14], [5, 6, 7, 3, 1, 2]])  # swapped order; second one 3/4 right
    scores = metrics.text_scores(rec, truth, pad_id=0)
    assert scores["exact_sequences"] == 0.5 and scores["assignment"] == [1, 0]
    assert scores["token_accuracy"] == pytest.approx(9 / 10)
    # ROUGE-1 of (5 6 7 8) vs (5 6 7 3 1 2): P 3/6, R 3/4 -> F 0.6; the exact pair 1.0
    assert scores["rouge1"] == pytest.approx((1.0 + 0.6) / 2)
    assert scores["rouge2"] == pytest.approx((1.0 + 2 * (2 / 5) * (2 / 3) / (2 / 5 + 2 / 3)) / 2)
    from fedleak.data.tokenizers import default_tokenizer

    tok = default_tokenizer()
    ids = torch.tensor([tok.encode("the cat sat on the mat", add_special_tokens=False).ids])
    spec = DataSpec("t", (1, 1, ids.shape[1]), 30522, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    from fedleak.types import ClientData

    result = metrics.evaluate(Reconstruction(ids.clone()), ClientData(ids, torch.tensor([-100])), spec, tokenizer=tok)
    assert result["rouge_on"] == "text" and result["rougeL"] == 1.0 and result["exact_sequences"] == 1.0
    empty = metrics.text_scores(torch.zeros(0, 6, dtype=torch.long), truth, pad_id=0)
    assert empty["rouge1"] == 0 and empty["exact_sequences"] == 0


def test_model_folder_causal_roundtrip(tmp_path, lm_data):
    """A saved causal LM folder (config + safetensors + tokenizer.json) loads back as the same model."""
    import shutil

    from fedleak.audit.plan.text import model_task_and_tokenizer
    from fedleak.data.tokenizers import minilm_path

    spec, clients = lm_data
    original = models.build("gpt2-tiny", spec, seed=5)
    original.hf.save_pretrained(tmp_path)
    shutil.copy(minilm_path() / "tokenizer.json", tmp_path / "tokenizer.json")
    task, tokenizer = model_task_and_tokenizer(str(tmp_path))
    assert task == "causal-lm" and tokenizer.get_vocab_size() == 30522
    loaded = models.build(str(tmp_path), spec, seed=0)
    assert loaded.task == "causal-lm" and loaded.pad_id == 0
    with torch.no_grad():
        assert torch.allclose(loaded(clients[0].inputs).logits, original(clients[0].inputs).logits, atol=1e-5)


def test_rouge_of_a_line_of_punctuation_is_scored_on_its_tokens():
    """rouge-score keeps no word of "= = = …": a recovery right in 29 of 30 tokens scored 0 on text; such pairs are
    scored on their token ids (MiniLM 4 × 32, one client of benchmarks/results/llm_minilm_dropout_4x32.json)."""
    pytest.importorskip("rouge_score")
    from fedleak.metrics.text import text_scores

    from fedleak.data.tokenizers import default_tokenizer, encode

    tok = default_tokenizer()
    (eq,), (dash,) = encode(tok, "="), encode(tok, "-")
    truth = torch.tensor([[eq] * 30, [eq, dash] * 15])
    rec = truth.clone()
    rec[0, 3] = dash
    result = text_scores(rec, truth, tokenizer=tok)
    assert result["rouge_on_tokens"] == 1  # the identical pair scores 1 before any tokenizer
    assert 0.9 < result["rouge1_per_input"][0] < 1.0 and result["rouge1_per_input"][1] == 1.0
