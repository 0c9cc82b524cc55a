"""Federated learning simulation: the one client update and the defenses inside it."""

from .client import (LocalResult, batch_schedule, client_rounds, client_update, cross_entropy, local_training,
                     sequential_schedule)
from .defenses import Defense

__all__ = ["Defense", "LocalResult", "batch_schedule", "client_rounds", "client_update", "cross_entropy", "local_training",
           "sequential_schedule"]
