"""The model every node trains: a small MLP on fedleak's embedded digits (28×28, 62 classes)."""

import torch
from torch import nn


def Net() -> nn.Module:  # noqa: N802 - the factory [tool.fedleak] model names
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.Sigmoid(), nn.Linear(16, 62))
