"""Reading what a test's code logged, independent of how the log is formatted.

Once Airflow's task logging has been configured in a test worker (any ``dag.test()`` or task
run before), the records reaching pytest's capture are formatted as JSON lines, so
``caplog.text`` holds escaped messages and depends on test order. The messages themselves
(``LogRecord.getMessage()``) do not: assert on them.
"""

from __future__ import annotations

import pytest


def logged_messages(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record's message, one per line, exactly as the code logged it."""
    return "\n".join(record.getMessage() for record in caplog.records)
