"""Faults planted inside the real Opacus (issue #42, item 3): to show that the audit finds them from canary outputs.

Each fault is a context manager that monkeypatches one real Opacus function for its duration; nothing in the audit
knows which is active (:mod:`.opacus_audit` sees only the gradients Opacus hands to the optimizer):

* ``noise=F`` — ``opacus.optimizers.optimizer._generate_noise`` draws with F × the standard deviation it is given
  (the kind of noise-normalization bug of Opacus #819 / arXiv 2605.15648);
* ``no-clip`` — ``DPOptimizer.clip_and_accumulate`` sums the per-sample gradients without clipping them;
* ``clip-after-noise`` — the per-sample gradients are summed unclipped, the noise added, and the noisy sum clipped
  to norm C·B afterwards (``DPOptimizer.add_noise``);
* ``shuffle`` — ``opacus.data_loader.DPDataLoader.from_data_loader`` returns a shuffling loader of fixed-size
  batches while the accountant is still told Poisson with q = B/N (Chua et al., ICML 2024).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from ..errors import FedleakError

FAULTS = ("noise=0.5", "noise=0.1", "no-clip", "clip-after-noise", "shuffle")


@contextlib.contextmanager
def planted(fault: str) -> Iterator[str]:
    """Plant ``fault`` (one of :data:`FAULTS`, or ``noise=F``) in the real Opacus; yields the function patched."""
    import opacus.data_loader as dl
    import opacus.optimizers.optimizer as opt

    patches: list[tuple[object, str, object]] = []
    key, _, value = fault.partition("=")
    if key == "noise" and value:
        factor = float(value)
        original = opt._generate_noise

        def noise(std, reference, generator=None, secure_mode=False):
            return original(std * factor, reference, generator=generator, secure_mode=secure_mode)

        patches.append((opt, "_generate_noise", noise))
        where = "opacus.optimizers.optimizer._generate_noise"
    elif fault == "no-clip":
        patches.append((opt.DPOptimizer, "clip_and_accumulate", _accumulate_unclipped))
        where = "opacus.optimizers.optimizer.DPOptimizer.clip_and_accumulate"
    elif fault == "clip-after-noise":
        original_noise = opt.DPOptimizer.add_noise

        def add_noise_then_clip(self):
            original_noise(self)
            total = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in self.params))
            bound = self.max_grad_norm * (self.expected_batch_size or 1)
            factor = min(1.0, bound / (float(total) + 1e-12))
            for p in self.params:
                p.grad.mul_(factor)

        patches += [(opt.DPOptimizer, "clip_and_accumulate", _accumulate_unclipped),
                    (opt.DPOptimizer, "add_noise", add_noise_then_clip)]
        where = "opacus.optimizers.optimizer.DPOptimizer.clip_and_accumulate + add_noise"
    elif fault == "shuffle":
        original_from = dl.DPDataLoader.from_data_loader.__func__

        def from_data_loader(cls, data_loader, *, generator=None, **kwargs):
            poisson = original_from(cls, data_loader, generator=generator, **kwargs)
            shuffled = torch.utils.data.DataLoader(data_loader.dataset, batch_size=data_loader.batch_size,
                                                   shuffle=True, generator=generator,
                                                   collate_fn=data_loader.collate_fn)
            shuffled.sample_rate = poisson.sample_rate  # what the accountant is told
            return shuffled

        patches.append((dl.DPDataLoader, "from_data_loader", classmethod(from_data_loader)))
        where = "opacus.data_loader.DPDataLoader.from_data_loader"
    else:
        raise FedleakError(f"fault: one of {', '.join(FAULTS)} or noise=F, got {fault!r}")
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, new in patches:
            setattr(owner, name, new)
        yield where
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)


def _accumulate_unclipped(self) -> None:
    """``clip_and_accumulate`` without the clipping: per-sample gradients summed as they are."""
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    for p in self.params:
        _check_processed_flag(p.grad_sample)
        grad = self._get_flat_grad_sample(p).to(p.dtype).sum(0)
        p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
        _mark_as_processed(p.grad_sample)
