"""The audit's numbers do not depend on the caller's torch thread count (issue 23 item 3).

The unrolled FedAvg attacks round differently on 1 and 2 threads (measured: Dimitrov et al. at seed
0 moves by up to 0.88 in pixel value after 30 iterations), so ``fedleak.audit`` runs on ``threads``
threads (default 1, as the CLI) and restores the caller's setting.
"""

import pytest
import torch

import fedleak
from fedleak.errors import FedleakError

TINY = {"algorithm": "fedavg", "epochs": 1, "batch_size": 2, "samples": 2, "attacks": "dimitrov", "iterations": 10,
        "malicious": False}


def _psnr(tmp_path, name):
    result = fedleak.audit(TINY, out=tmp_path / name, progress=None, log=None)
    return result["scenarios"]["fedavg"]["attacks"]["dimitrov"]["psnr_per_input"], result["environment"]


def test_audit_numbers_are_independent_of_the_callers_thread_count(tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two, env = _psnr(tmp_path, "a")
        assert torch.get_num_threads() == 2 and env["threads"] == 1 and env["torch"] == torch.__version__
        torch.set_num_threads(1)
        one, _ = _psnr(tmp_path, "b")
    finally:
        torch.set_num_threads(before)
    assert one == two


def test_audit_threads_is_checked():
    with pytest.raises(FedleakError, match="threads must be an integer"):
        fedleak.audit(TINY, threads=0, progress=None, log=None)
