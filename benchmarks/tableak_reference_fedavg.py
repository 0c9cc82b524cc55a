"""The FedAvg setting of ``bench_tableak_reference.py``: TabLeak on one FedAvg client update, fedleak beside the
reference code (``eth-sri/tableak`` @ 6b8c1c8) on the same records, weights and local training.

The reference's FedAvg experiment (``run_fed_avg_attacks.py``, config 52 "TabLeak"; ``fedavg_attacks.sh``): a
client of 32 records (``max_client_dataset_size``), one global round of ``train_and_attack_fed_avg`` with local
SGD at lr 0.01 over E ∈ {1, 5, 10} local epochs of consecutive batches of m ∈ {32, 16, 8} records (no reshuffle),
the attack ``fed_avg_attack`` (Dimitrov et al.'s per-epoch records, the epoch-matching prior
``epoch_matching_prior_mean_square_error`` with λ from {0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001} picked per cell
by the ground truth, uniform init, cosine loss, signed Adam 0.06, softmax + sigmoid tricks, τ = 1, 1500
iterations), 15 restarts (``post_selection``) pooled by ``median`` around the lowest-loss restart.

Here a setting ``DATASET:N:fedavg-eE-mM`` (e.g. ``adult:32:fedavg-e1-m8``) runs, per batch:

* fedleak: :func:`fedleak.fl.client.client_update` under ``Protocol("fedavg", E, M, lr, reshuffle=False)`` on
  fedleak's client ``k`` and its ``tableak`` attack on that update (``epoch_prior`` λ);
* the reference: its OWN ``train_and_attack_fed_avg`` (one client, one global round, ``shuffle=False``,
  ``parallelized=False``) on the same rows (the reference's encoding, as for FedSGD), the same weights and
  labels; its dataset object answers ``get_Xtrain``/``get_ytrain`` with this batch (a shallow copy; nothing of
  the reference's code is changed). Its client training is run once without an attack first: the cosine of its
  update θˢ − θᶜ to fedleak's (first layer permuted) is ``gradient_cosine``.

The same one fix as for FedSGD: ``fed_avg_attack`` also applies the in-place ``continuous_sigmoid_bound`` to the
optimized leaf after the loop (``attacks/fed_avg_inversion_attack.py`` l. 277–279), refused by PyTorch ≥ 2; the
module's name is wrapped so that such a leaf is bound on a detached copy (same values).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent / "results" / "tableak_reference_fedavg.json"  # the run the docs quote
LR = 0.01  # run_fed_avg_attacks.py configs[52]['lr']
EPOCH_PRIOR = 0.01  # one λ of the reference's grid, for both codes (fedleak's default)
MARK = ("<!-- regen:bench-tableak-reference-fedavg -->", "<!-- /regen:bench-tableak-reference-fedavg -->")
_PATTERN = re.compile(r"fedavg-e(\d+)-m(\d+)")


def parse(text: str, records: int, lr: float = LR, epoch_prior: float = EPOCH_PRIOR) -> dict | None:
    """``fedavg-eE-mM`` → the local protocol; None when malformed (the caller names the setting)."""
    match = _PATTERN.fullmatch(text)
    if not match:
        return None
    epochs, batch = int(match[1]), int(match[2])
    if not 1 <= epochs <= 100 or not 1 <= batch <= records:
        return None
    return {"local_epochs": epochs, "local_batch": batch, "lr": lr, "epoch_prior": epoch_prior}


def label(row: dict) -> str:
    """The setting as the table's first column: the dataset, and the local protocol for FedAvg rows."""
    f = row.get("fedavg")
    return row["dataset"] if not f else \
        f"{row['dataset']} FedAvg E {f['local_epochs']} m {f['local_batch']} λ {f['epoch_prior']:g}"


def _patch(reference) -> None:
    """The one fix (module docstring), applied once to the reference's FedAvg module."""
    import attacks.fed_avg_inversion_attack as fa

    if getattr(fa.continuous_sigmoid_bound, "fedleak_fix", False):
        return
    original = fa.continuous_sigmoid_bound

    def bound(x, dataset, T=1.0):
        if x.is_leaf and x.requires_grad:
            x = x.detach().clone()
        return original(x, dataset, T)

    bound.fedleak_fix = True
    fa.continuous_sigmoid_bound = bound


def _batch_dataset(ref, x_ref: torch.Tensor, labels: torch.Tensor):
    """The reference's dataset object whose training split is this batch (a shallow copy)."""
    data = copy.copy(ref)
    data.get_Xtrain = lambda: x_ref.detach().clone()
    data.get_ytrain = lambda: labels.detach().clone()
    return data


def _run_reference(reference, job: dict, restarts: int, iterations: int, attacked: bool):
    f = job["fedavg"]
    net = copy.deepcopy(job["net"])
    with job["cwd"](reference.path):
        return reference.attacks.train_and_attack_fed_avg(
            net=net, n_clients=1, n_global_epochs=1, n_local_epochs=f["local_epochs"],
            local_batch_size=f["local_batch"], lr=f["lr"], dataset=_batch_dataset(job["ref"], job["x_ref"],
                                                                                  job["labels"]),
            shuffle=False, attacked_clients="all" if attacked else None, attack_iterations=iterations,
            reconstruction_loss="cosine_sim", priors=None,
            epoch_matching_prior=(f["epoch_prior"], "mean_squared_error") if f["epoch_prior"] > 0 else None,
            post_selection=restarts, attack_learning_rate=0.06, return_all=False,
            pooling="median" if restarts > 1 else None, perfect_pooling=False, initialization_mode="uniform",
            softmax_trick=True, gumbel_softmax_trick=False, sigmoid_trick=True, temperature_mode="constant",
            sign_trick=True, fish_for_features=None, verbose=False, max_client_dataset_size=job["x_ref"].shape[0],
            parallelized=False)


def prepare(bench, reference, dataset: str, records: int, batch: int, seed: int, model_seed: int,
            fedavg: dict) -> dict:
    """The FedSGD job of the same batch (records, weights, encodings), with the FedAvg client update of both codes
    and their cosine in place of the gradients'."""
    from fedleak.fl.client import client_update
    from fedleak.types import Protocol

    _patch(reference)
    job = bench.prepare(reference, dataset, records, batch, seed, model_seed)
    protocol = Protocol("fedavg", fedavg["local_epochs"], fedavg["local_batch"], fedavg["lr"], reshuffle=False)
    data, perm = job["data"], job["perm"]
    update = client_update(job["model"], data, protocol, seed=seed, metadata={"labels": data.labels.tolist()})
    job.update(update=update, fedavg=fedavg, cwd=bench._cwd)
    trained, *_ = _run_reference(reference, job, 1, 1, attacked=False)  # its own local training, no attack
    ours = [t[:, perm] if k == 0 else t for k, t in enumerate(update.pseudo_gradient().values())]
    theirs = [a.detach() - b.detach() for a, b in zip(job["net"].parameters(), trained.parameters())]
    flat_ours = torch.cat([v.reshape(-1) for v in ours]).double()
    flat_theirs = torch.cat([v.reshape(-1) for v in theirs]).double()
    job["gradient_cosine"] = float(torch.nn.functional.cosine_similarity(flat_ours, flat_theirs, dim=0))
    # ‖Δ_reference − η·Ĝ_fedleak‖ / ‖η·Ĝ_fedleak‖: the same update up to float32 rounding
    job["update_relative_difference"] = float((flat_theirs - fedavg["lr"] * flat_ours).norm()
                                              / (fedavg["lr"] * flat_ours).norm())
    return job


def attack(bench, reference, job: dict, implementation: str, restarts: int, iterations: int, seed: int,
           batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(reconstruction in fedleak's encoding, in the reference's encoding)."""
    schema, ref, perm = job["spec"].schema, job["ref"], job["perm"]
    if implementation == "fedleak":
        from fedleak.attacks import build as build_attack

        rec = build_attack("tableak", seed=seed, restarts=restarts, iterations=iterations, labels="known",
                           epoch_prior=job["fedavg"]["epoch_prior"]).reconstruct(job["update"], job["model"],
                                                                                 job["spec"])
        guess = rec.inputs.reshape(rec.inputs.shape[0], -1)
        return guess, bench.to_reference(schema, ref, perm, guess)
    torch.manual_seed(seed * 1000 + batch)
    np.random.seed(seed * 1000 + batch)
    _, _, reconstructions, _ = _run_reference(reference, job, restarts, iterations, attacked=True)
    out = reconstructions[0][0].detach()  # global round 0, the one client
    return bench.to_fedleak(schema, ref, perm, out), out
