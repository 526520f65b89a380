"""Checkpoint verification: is a checkpoint restorable, before anyone needs it?

* :mod:`.report` — the stored result document ``chk-<n>/_verification.json``.
* :mod:`.structural` — manifest, files, offsets, source retention, ledger checks.
* :mod:`.deep` — restore into a scratch dir, read the state with Spark's ``statestore``
  reader and run the pipeline's Great Expectations suite on it.
* :mod:`.runner` — which checkpoints to verify, and running the checks on them.
* :mod:`.selection` — the newest checkpoint that verifies (``restore --latest-valid``).
* :mod:`.html` — the HTML summary.
"""

from barrierflow.verification.report import CheckResult, CheckStatus, VerificationReport

__all__ = ["CheckResult", "CheckStatus", "VerificationReport"]
