"""Reconstruction attacks: ``fedleak.attacks.build(name, **options).reconstruct(update, model, spec)``."""

from .base import ATTACKS, Attack, available, build, register

__all__ = ["ATTACKS", "Attack", "available", "build", "register"]
