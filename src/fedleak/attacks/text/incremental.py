"""Decoder growth with the first block's key/value cache (the speed of DAGER Alg. 1 at width 768).

Growing prefixes left to right tests every (prefix, candidate) pair at one new position. Recomputing
each whole pair costs P·C·(t+1) token passes per step; with causal attention the prefix's keys and
values do not depend on the candidate, so they are computed once per prefix (``past_key_values``
of the first block) and every candidate adds one token: P·C passes per step. The model's own
modules run (``transformers``' cache), the forward stops at the second probe (a pre-hook).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.func import functional_call

from .probes import _hook, _Stop, device_of, hf_of


def _hf_params(model: nn.Module, params: dict) -> dict:
    if hf_of(model) is model:
        return params
    return {k[3:]: v for k, v in params.items() if k.startswith("hf.")}


def _run(model, params, store, module, **kwargs):
    hf = hf_of(model)
    device = device_of(model, params)
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    if "past_key_values" in kwargs and _takes_cache(hf):  # the newer name of the same argument
        kwargs["cache"] = kwargs.pop("past_key_values")
    with torch.no_grad(), _hook(module, store, stop=True):
        try:
            functional_call(hf, _hf_params(model, params), (), kwargs, strict=False)
        except _Stop:
            pass


def _takes_cache(hf: nn.Module) -> bool:
    base = hf.get_base_model() if hasattr(hf, "get_base_model") else hf
    return "cache" in inspect.signature(base.forward).parameters


def last_inputs(model: nn.Module, params: dict, module: nn.Module, prefixes: torch.Tensor,
                cand: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """The input of ``module`` at the new position for every (prefix, candidate) pair, pairs in
    ``prefixes.repeat_interleave(len(cand))`` order: (P·C, d)."""
    from transformers import DynamicCache

    p, t = prefixes.shape
    c = cand.numel()
    if t == 0:
        store: list = []
        _run(model, params, store, module, input_ids=cand.view(-1, 1).repeat(p, 1))
        return store[0][:, -1]
    cache = DynamicCache()
    store = []
    _run(model, params, store, module, input_ids=prefixes, past_key_values=cache, use_cache=True)
    keys, values = cache.layers[0].keys, cache.layers[0].values
    out = []
    rows = torch.arange(p).repeat_interleave(c)
    tokens = cand.repeat(p)
    for start in range(0, p * c, chunk):
        sel = rows[start:start + chunk]
        sub = DynamicCache()
        sub.update(keys[sel], values[sel], 0)
        store = []
        n = sel.numel()
        _run(model, params, store, module, input_ids=tokens[start:start + chunk].view(-1, 1), past_key_values=sub,
             use_cache=True, position_ids=torch.full((n, 1), t, dtype=torch.long),
             attention_mask=torch.ones(n, t + 1, dtype=torch.long))
        out.append(store[0][:, -1])
    return torch.cat(out)
