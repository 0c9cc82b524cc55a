"""Shared test helpers: the read-only real data next to the repository, small fixtures."""

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)

# FEDLEAK_SHARED_DATA overrides it (a git worktree sits one level deeper than the checkout)
SHARED = Path(os.environ.get("FEDLEAK_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def shared_path(*parts: str) -> Path:
    """A path under ``../shared/data``; the test is skipped when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available at {path}")
    return path
