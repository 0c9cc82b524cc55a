"""``tag``: the optimization baseline (TAG, Deng et al. 2021 §3; the relaxed-one-hot family of breaching).

Dummy inputs are relaxed one-hot vectors over the vocabulary per position (softmax of free logits,
fed as embeddings ``softmax(Z)·E``); the client's update is simulated through the one client
update (:func:`fedleak.fl.local_training`, ``create_graph=True``) and matched to the observed one
with TAG's distance ‖ΔW − ΔW'‖² + α‖ΔW − ΔW'‖₁ (α = 0.01 as in TAG §3.2). Causal-LM targets are
the current arg-max tokens (the next-token loss needs ids); classifier labels are the server-known
ones when the update carries them, else the classes whose head-bias gradient is negative (iDLG's
rule, Zhao et al. 2020), cycled over the batch. The result is snapped to the arg-max tokens; it is an
*estimate* (never certain).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from torch import nn

from ...fl.client import local_training, sequential_schedule
from ...types import DataSpec, Reconstruction, Update
from ..base import Attack, AttackOptions, register
from ..progress import loop_progress
from .common import task_of, text_result, vocab_size
from .probes import _param_names, base_of


@dataclass(frozen=True)
class TagOptions(AttackOptions):
    steps: int = 100
    lr: float = 0.1
    alpha: float = 0.01


class Tag(Attack):
    Options = TagOptions
    name = "tag"
    positive = ("steps", "lr")
    non_negative = ("alpha",)

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        start = time.perf_counter()
        opts = self.options
        gen = torch.Generator().manual_seed(opts.seed)
        n, length, vocab = int(update.num_samples), int(spec.shape[-1]), vocab_size(model)
        target = {k: v.detach() for k, v in update.pseudo_gradient().items()}
        params = {k: v.detach() for k, v in update.server_params.items()}
        table = base_of(model).get_input_embeddings().weight
        table_name = _param_names(model).get(id(table))
        task = task_of(model)
        labels = self._labels(model, update, target, n, task)
        logits = (0.01 * torch.randn(n, length, vocab, generator=gen)).to(table.device).requires_grad_(True)
        optimizer = torch.optim.Adam([logits], lr=opts.lr)
        relaxed = copy.copy(model)  # same modules and parameter names, embeddings in, the model's own loss
        state = {}

        def forward(embeds):
            out = model.forward_embeds(embeds)
            return out if task == "classification" else type(model(state["ids"][:1]))(out, state["ids"])

        relaxed.forward = forward
        history = []
        with loop_progress(opts.steps, "iteration", "tag") as tick:  # progress, interrupt check
            for step in range(opts.steps):
                optimizer.zero_grad()
                weights = logits.softmax(-1)
                emb_table = params.get(table_name, table.detach())
                state["ids"] = logits.argmax(-1).detach()
                embeds = weights @ emb_table
                result = local_training(relaxed, params, embeds, labels, sequential_schedule(n, update.protocol),
                                        update.protocol.lr, create_graph=True, train_mode=False,
                                        loss_fn=model.loss_fn if hasattr(model, "loss_fn") else None)
                sim = result.grad_sum
                loss = sum(((sim[k] - target[k]) ** 2).sum() + opts.alpha * (sim[k] - target[k]).abs().sum()
                           for k in target)
                loss.backward()
                optimizer.step()
                history.append(loss.item())
                tick(step + 1, history[-1])
        ids = logits.argmax(-1).detach().cpu()
        extras = {"exactness": {"holds": False, "tokens": n * length, "limit": 0,
                                "reason": "optimization attack: an estimate at a stated budget, never exact"},
                  "certain": False, "loss": history[-1] if history else None, "steps": opts.steps,
                  "seconds": time.perf_counter() - start}
        return text_result(ids, model, extras)

    @staticmethod
    def _labels(model, update, gradient, n, task):
        if task != "classification":
            return torch.full((n,), -100, dtype=torch.long)
        known = update.metadata.get("labels")
        if known is not None:
            return torch.as_tensor(known, dtype=torch.long)[:n]
        bias = next((g for k, g in gradient.items() if k.endswith("bias") and g.dim() == 1
                     and g.numel() == getattr(base_of(model).config, "num_labels", -1)), None)
        if bias is None:
            return torch.zeros(n, dtype=torch.long)
        classes = torch.nonzero(bias < 0).flatten()
        classes = classes if classes.numel() else bias.argmin().view(1)
        return classes.repeat(n)[:n]


register("tag", Tag, "TAG (Deng et al. 2021): relaxed one-hot text inputs matched to the update, L2 + L1")
