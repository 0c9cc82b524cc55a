"""VGIA-style certified recovery (issue 44 item 3): a malicious server's parallel hyperplanes cut the client's batch
of Adult records into slabs; a slab holding one record is read exactly and certified by recomputation."""

import pytest
import torch

from fedleak import attacks, models
from fedleak.attacks.tabular.vgia import ship
from fedleak.data import tabular
from fedleak.errors import FedleakError
from fedleak.fl.client import client_update
from fedleak.types import ClientData, Protocol


def _run(records: int, slabs: int):
    torch.set_num_threads(1)
    spec, parts = tabular.load("adult", num_clients=2, samples_per_client=256, seed=0)
    # the hyperplanes' offsets from records the server holds (the second IID part), never the client's
    shipped = ship(models.build("tabular-mlp", spec, seed=0), spec, parts[-1].inputs, slabs=slabs, seed=0)
    client = parts[0].subset(records)
    update = client_update(shipped, ClientData(client.inputs.reshape(records, *spec.shape), client.labels, "c"),
                           Protocol("fedsgd"), seed=0)
    return spec, client, attacks.build("vgia").reconstruct(update, shipped, spec)


def _exact(client, rec, i) -> bool:
    """Whether recovered record ``i`` equals one of the client's records cell for cell, with its label."""
    dist = (client.inputs - rec.inputs[i].reshape(-1)).abs().max(dim=1).values
    j = int(dist.argmin())
    return float(dist[j]) == 0.0 and int(client.labels[j]) == int(rec.labels[i])


def test_every_record_certified_and_the_batch_proved():
    # measured (seed 0, 8 records, 64 slabs): each record alone in its slab, all 8 certified, and the whole update
    # recomputed from them matches the one sent
    _, client, rec = _run(8, 64)
    assert rec.extras["certified_count"] == 8 and all(rec.extras["certified"])
    assert all(_exact(client, rec, i) for i in range(8))
    assert rec.extras["certain"] and rec.extras["exactness"]["verification"]["matches"]


def test_certified_slabs_are_exact_and_mixed_slabs_are_refused():
    # measured (seed 0, 32 records, 128 slabs): 26 occupied slabs, 21 certified — every one exactly a client record
    # with its label; the slabs holding several records fail the re-encoding and recomputation tests
    _, client, rec = _run(32, 128)
    certified = [i for i, ok in enumerate(rec.extras["certified"]) if ok]
    assert len(certified) == 21 and rec.extras["exactness"]["occupied_slabs"] == 26
    assert all(_exact(client, rec, i) for i in certified)  # no false certificate
    refused = [c for c, ok in zip(rec.extras["exactness"]["checks"], rec.extras["certified"]) if not ok]
    assert refused and all(c["relative_error"] > 1e-2 for c in refused)
    assert not rec.extras["certain"]  # 21 of 32: the records are proved one by one, not the batch


def test_vgia_needs_records_and_a_hyperplane_block():
    spec, parts = tabular.load("adult", num_clients=1, samples_per_client=4, seed=0)
    plain = models.build("tabular-mlp", spec, seed=0)
    update = client_update(plain, parts[0], Protocol("fedsgd"), seed=0)
    with pytest.raises(FedleakError, match="imprint"):
        attacks.build("vgia").reconstruct(update, plain, spec)
