"""GGUF files (issue 47 classes 3, 4, 7): one line naming the file and the field, exit 2, nothing written.

The file is checked with ``gguf``'s reader before transformers or tokenizers see it (sizes, special-token ids,
merges), and what transformers loads is checked after (a tensor it had to fill with random weights, NaN weights):
one adapter for the third-party loader, not a case per crash. The instances of issue 47: a BOS id out of range or
a float, malformed merges, merges naming unknown tokens, zero attention heads (``ZeroDivisionError`` in ``audit``
and ``convert-gguf``), a missing tensor (audited and converted with random weights), ``context_length 0``
(accepted), NaN weights (blamed on ``--lr``), zero blocks (blamed on "no gradient").
"""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")
pytest.importorskip("transformers")

from gguf_files import write  # noqa: E402
from hostile_doors import check_api, check_cli  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fedleak  # noqa: E402
from fedleak.errors import FedleakError  # noqa: E402

#: (case, what to break, the words the message must name)
CASES = [
    ("BOS id out of range", dict(bos=99), "bos_token_id"),
    ("BOS id a float", dict(bos_float=True), "bos_token_id"),
    ("merge of one token", dict(merges=("abc",)), "merges"),
    ("merge naming unknown tokens", dict(merges=("x y",)), "merges"),
    ("zero attention heads", dict(heads=0), "head_count"),
    ("width not a multiple of heads", dict(heads=3), "head_count"),
    ("zero blocks", dict(blocks=0), "block_count"),
    ("context length 0", dict(ctx=0), "context_length"),
]
#: broken only in what transformers loads (found after loading, before any work)
LOADED = [
    ("a tensor missing", dict(drop=("blk.0.attn_q.weight",)), "q_proj"),
    ("NaN weights", dict(nan=True), "NaN"),
]


@pytest.mark.parametrize("case, edit, needle", CASES + LOADED, ids=[c[0] for c in CASES + LOADED])
def test_convert_gguf_refuses(case, edit, needle, tmp_path, capsys):
    write(tmp_path / "m.gguf", **edit)
    assert check_cli(["convert-gguf", "m.gguf", "--to", "conv"], needle, tmp_path, capsys) == ""
    assert not (tmp_path / "conv").exists()


@pytest.mark.parametrize("case, edit, needle", CASES, ids=[c[0] for c in CASES])
def test_audit_refuses_before_reading_data(case, edit, needle, tmp_path, capsys):
    write(tmp_path / "m.gguf", **edit)
    assert check_cli(["audit", "--model", "m.gguf", "--data", "text", "--out", "out"], needle, tmp_path, capsys,
                     out=tmp_path / "out") == ""


@pytest.mark.parametrize("case, edit, needle", LOADED, ids=[c[0] for c in LOADED])
def test_the_model_api_refuses_what_transformers_would_paper_over(case, edit, needle, tmp_path):
    path = write(tmp_path / "m.gguf", **edit)
    spec, _ = fedleak.data.load("text", num_clients=1, samples_per_client=1, seq_len=4, task="causal-lm",
                                tokenizer=None)
    assert check_api(lambda: fedleak.models.build(str(path), spec), needle) == ""


def test_the_whole_tiny_gguf_loads_and_converts(tmp_path):
    """The same writer's untouched file is accepted: the cases above fail for their one defect."""
    path = write(tmp_path / "m.gguf")
    info = fedleak.convert_gguf(path, tmp_path / "conv")
    assert info["architecture"] == "llama" and "model.safetensors" in info["files"]


@pytest.mark.parametrize("call, needle", [
    (lambda t: fedleak.convert_gguf(5, t / "x"), "gguf_file"), (lambda t: fedleak.convert_gguf("a.gguf", 5), "to"),
    (lambda t: fedleak.inspect_model_file(None), "path"),
], ids=["convert_gguf(5)", "convert_gguf(to=5)", "inspect_model_file(None)"])
def test_api_arguments_are_named(call, needle, tmp_path):
    """Issue 47 class 6: convert_gguf(5, …) and inspect_model_file(None) raised TypeError."""
    assert check_api(lambda: call(tmp_path), needle) == ""


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(heads=st.integers(-2, 9), blocks=st.integers(0, 2), ctx=st.integers(0, 64), bos=st.integers(0, 12),
       merges=st.lists(st.sampled_from(["a b", "ab c", "a  b", "q b", "a", " ", "b a"]), max_size=3))
def test_fuzzed_gguf_metadata_is_checked_or_loads(tmp_path_factory, heads, blocks, ctx, bos, merges):
    """Whatever the metadata, ``check_gguf`` and the tokenizer either accept or raise one FedleakError line."""
    from fedleak.models.hf.gguf import check_gguf, gguf_tokenizer

    path = tmp_path_factory.mktemp("fz") / "m.gguf"
    try:
        write(path, heads=max(heads, 0), blocks=blocks, ctx=ctx, bos=bos, merges=tuple(merges))
    except (ValueError, OverflowError):
        return  # gguf's writer itself refused the value
    try:
        check_gguf(path)
        gguf_tokenizer(path)
    except FedleakError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
