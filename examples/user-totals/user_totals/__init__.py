"""Example user package: payments summed per user and event-time minute (see ../README.md)."""
