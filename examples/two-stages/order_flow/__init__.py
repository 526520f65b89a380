"""Example user package: the two stages of examples/two-stages (see ../README.md)."""
