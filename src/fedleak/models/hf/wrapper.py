""":class:`HFTextModel`: a Hugging Face transformer as a fedleak model (token ids in, loss of its task).

The wrapper is what the client update, the attacks and the metrics see:

* ``.hf`` — the ``transformers`` model (a ``peft`` model when LoRA adapters are on);
* ``.task`` — ``"causal-lm"`` or ``"classification"``;
* ``.tokenizer`` — a ``tokenizers.Tokenizer``; ``.pad_id`` — its padding id; the attention mask is
  ``ids != pad_id``;
* ``.lora_rank`` — ``None`` or the adapters' rank R; ``.lora_config`` — its rank, α, dropout and targets;
* :meth:`dropout_rates` — the dropout probabilities that act in a training step (model and adapters);
* ``forward(ids)`` — ``ids`` (N, L) int64, or floats holding integers, or (N, 1, 1, L) as a text
  :class:`~fedleak.types.DataSpec` describes them. A classifier returns logits (N, C); a causal LM
  returns :class:`LMOutput` ``(logits (N, L, V), ids (N, L))``, because its loss reads the ids;
* ``forward_embeds(embeds, mask)`` — the same from input embeddings (N, L, d) (relaxed-token
  attacks such as TAG, Deng et al. 2021 §3);
* ``loss_fn(output, labels)`` — the client's training loss. Classification: mean cross-entropy of
  the class labels. Causal LM: mean next-token cross-entropy over the positions, the target of
  position t < L−1 being ``ids[t+1]`` and that of position L−1 being ``labels`` (the token that
  follows the sequence in the text; −100 where the text ends, as Hugging Face's ignore index);
  targets that are padding or −100 are ignored (Radford et al. 2019 §2: p(x) = Π p(x_t | x_<t)).

Dropout acts as the model's config and the LoRA config say (:mod:`.builders`): a client step runs in
train mode, so a pretrained model's dropout and PEFT's adapter dropout mask its inputs; the masks
come from torch's generator, which the client update seeds (:func:`fedleak.fl.client.client_update`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn
from torch.nn import functional as F

from ...errors import FedleakError

TASKS = ("causal-lm", "classification")
IGNORE = -100


class LMOutput(NamedTuple):
    """A causal LM's output: next-token logits (N, L, V) and the input ids (N, L) its loss reads."""

    logits: torch.Tensor
    ids: torch.Tensor


def as_ids(inputs: torch.Tensor) -> torch.Tensor:
    """Token ids (N, L) int64 from (N, L) or (N, 1, 1, L), integer or float (rounded)."""
    if not isinstance(inputs, torch.Tensor):
        raise FedleakError(f"a text model needs token ids as a tensor, got {type(inputs).__name__}")
    if inputs.dim() == 4 and inputs.shape[1] == inputs.shape[2] == 1:
        inputs = inputs.flatten(1)
    if inputs.dim() == 1:
        inputs = inputs.unsqueeze(0)
    if inputs.dim() != 2:
        raise FedleakError(f"a text model needs token ids of shape (N, L) or (N, 1, 1, L), got {tuple(inputs.shape)}")
    if inputs.is_floating_point():
        inputs = inputs.detach().round()
    return inputs.long()


class HFTextModel(nn.Module):
    """A ``transformers`` model with fedleak's interface (see the module docstring)."""

    def __init__(self, hf: nn.Module, task: str, tokenizer, pad_id: int, *, lora_rank: Optional[int] = None,
                 name: str = "") -> None:
        super().__init__()
        if task not in TASKS:
            raise FedleakError(f"text model task must be one of {', '.join(TASKS)}, got {task!r}")
        self.hf = hf
        self.task = task
        self.tokenizer = tokenizer
        self.pad_id = int(pad_id)
        self.lora_rank = None if lora_rank is None else int(lora_rank)
        self.lora_config: Optional[dict] = None
        self.name = name
        #: samples per slice of gradient accumulation (None: the whole minibatch in one forward)
        self.micro_batch: Optional[int] = None

    @property
    def config(self):
        return self.hf.config

    @property
    def vocab_size(self) -> int:
        return int(self.input_embeddings().weight.shape[0])

    def input_embeddings(self) -> nn.Embedding:
        """The token embedding table (rows = vocabulary)."""
        return self.hf.get_input_embeddings()

    def dropout_rates(self) -> dict:
        """``{module name: p}`` of every dropout with p > 0 (what a train-mode step masks)."""
        return {name: float(m.p) for name, m in self.hf.named_modules() if isinstance(m, nn.Dropout) and m.p > 0}

    def attention_mask(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids != self.pad_id).long()

    def forward(self, inputs: torch.Tensor):
        ids = as_ids(inputs)
        out = self.hf(input_ids=ids, attention_mask=self.attention_mask(ids))
        return out.logits if self.task == "classification" else LMOutput(out.logits, ids)

    def forward_embeds(self, embeds: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits from input embeddings (N, L, d); ``mask`` (N, L) defaults to all positions."""
        if mask is None:
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        return self.hf(inputs_embeds=embeds, attention_mask=mask).logits

    def loss_terms(self, inputs: torch.Tensor, labels: torch.Tensor) -> int:
        """How many terms :meth:`loss_fn` averages over: sequences (classification) or counted next-token targets
        (gradient accumulation weights each micro-batch by its share, ``fl.local_sgd``)."""
        ids = as_ids(inputs)
        if self.task == "classification":
            return int(ids.shape[0])
        return int((next_token_targets(ids, labels, self.pad_id) != IGNORE).sum())

    def loss_fn(self, output, labels: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return F.cross_entropy(output, labels)
        logits, ids = output
        return next_token_loss(logits, ids, labels, self.pad_id)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, task={self.task!r}, pad_id={self.pad_id}, lora_rank={self.lora_rank}"


def next_token_targets(ids: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The target of every position: the next input token, then ``labels``; padding → −100."""
    targets = torch.cat([ids[:, 1:], labels.view(-1, 1).to(ids.dtype)], dim=1)
    return targets.masked_fill((targets == pad_id) | (ids == pad_id), IGNORE)


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy over the non-ignored positions (0 if there is none)."""
    targets = next_token_targets(ids, labels, pad_id).reshape(-1)
    flat = logits.reshape(-1, logits.shape[-1])
    per_token = F.cross_entropy(flat, targets.clamp_min(0), reduction="none")
    keep = (targets != IGNORE).to(per_token.dtype)
    return (per_token * keep).sum() / keep.sum().clamp_min(1.0)
