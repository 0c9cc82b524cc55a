"""A Flower app audited by fedleak (see ../README.md)."""
