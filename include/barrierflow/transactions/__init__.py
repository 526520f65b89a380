"""Two-phase commit: the transaction ledger and the sink template."""
