"""A Flower app with client-side DP, audited by fedleak's canary nodes (see ../README.md)."""
