"""Shared test helpers: the read-only real data next to the repository, small fixtures."""

from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_path(*parts: str) -> Path:
    """A path under ``../shared/data``; the test is skipped when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available at {path}")
    return path
