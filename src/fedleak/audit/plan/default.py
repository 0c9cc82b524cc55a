"""The embedded default audit: what ``fedleak audit`` runs with no argument.

No files needed: scikit-learn's handwritten digits rendered FEMNIST-style (``digits``), the FEMNIST
CNN of Dimitrov et al. (untrained, as in their Table 1), and two clients' protocols — a **FedSGD**
client sending one gradient of 4 images, and a **FedAvg** client training 5 epochs × 2 batches of 5
images at lr 0.004 — against an honest-but-curious and a malicious (64-bin imprint) server. Every
key a user gives replaces the matching default; ``--algorithm`` keeps only that protocol.
"""

from __future__ import annotations

DEFAULT_MODEL = "femnist-cnn"
DEFAULT_DATA = "digits"
DEFAULT_BINS = 64
#: candidate documents of the membership measurement of a text audit (``--membership``'s default count)
DEFAULT_CANDIDATES = 64
#: algorithm -> (samples N, epochs E, batch size m, client lr η)
DEFAULT_PROTOCOLS = {"fedsgd": (4, 1, None, 0.004), "fedavg": (10, 5, 5, 0.004)}


def describe(protocol, samples: int, secagg: int = 1) -> str:
    """One sentence on what the server receives under ``protocol`` (for the report)."""
    who = f"{secagg} clients whose updates the server sees only summed (secure aggregation); each" if secagg > 1 \
        else "The client"
    if protocol.algorithm == "fedsgd":
        return f"{who} sends the gradient of its mean loss over {samples} private images (FedSGD)."
    m = protocol.batch_size_for(samples)
    return (f"{who} trains locally for {protocol.epochs} epoch(s) × {protocol.batches_per_epoch(samples)} batch(es) "
            f"of {m} images (lr {protocol.lr:g}, {'reshuffled' if protocol.reshuffle else 'same order'} every "
            f"epoch) on {samples} private images and sends its new weights (FedAvg).")
