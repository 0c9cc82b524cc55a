"""Tiny GGUF language models written with ``gguf``'s own writer (a LLaMA of one block, width 8, a six-token
byte-pair tokenizer), whole or with one thing wrong: the GGUF door's catalogue (``test_catalogue_gguf.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

TOKENS = ["<s>", "</s>", "a", "b", "c", "ab"]


def write(path, *, heads=2, blocks=1, ctx=32, width=8, drop=(), nan=False, bos=0, merges=("a b",),
          tokens=None, bos_float=False) -> Path:
    """A loadable tiny LLaMA GGUF at ``path``; the keywords break one thing of it."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    ffn, vocab = 16, 6
    w.add_name("tiny")
    w.add_context_length(ctx)
    w.add_embedding_length(width)
    w.add_block_count(blocks)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(4)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(list(tokens or TOKENS))
    w.add_token_types([3, 3, 1, 1, 1, 1])
    w.add_token_merges(list(merges))
    if bos_float:
        w.add_float32("tokenizer.ggml.bos_token_id", 0.5)
    else:
        w.add_bos_token_id(bos)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (vocab, width), "output_norm.weight": (width,)}
    for b in range(max(blocks, 1)):
        shapes.update({f"blk.{b}.attn_norm.weight": (width,), f"blk.{b}.attn_q.weight": (width, width),
                       f"blk.{b}.attn_k.weight": (width, width), f"blk.{b}.attn_v.weight": (width, width),
                       f"blk.{b}.attn_output.weight": (width, width), f"blk.{b}.ffn_norm.weight": (width,),
                       f"blk.{b}.ffn_gate.weight": (ffn, width), f"blk.{b}.ffn_up.weight": (ffn, width),
                       f"blk.{b}.ffn_down.weight": (width, ffn)})
    for name, shape in shapes.items():
        if name in drop:
            continue
        values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if nan and name == "token_embd.weight":
            values[0, 0] = np.nan
        w.add_tensor(name, values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
