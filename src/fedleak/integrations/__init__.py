"""Bridges to federated-learning frameworks (optional dependencies, imported on use)."""
