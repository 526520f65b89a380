"""The HTML summary of verification results (``barrierflow verify --html PATH``): one
table row per checkpoint, its failed checks spelled out; self-contained, no scripts."""

from __future__ import annotations

import html
import logging
from datetime import UTC, datetime

from barrierflow.verification.report import VerificationReport

log = logging.getLogger(__name__)

_STYLE = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
.passed{color:#176f2c}.failed{color:#b00020;font-weight:bold}.skipped{color:#8a6d00}"""


def render_html(pipeline: str, reports: list[VerificationReport]) -> str:
    rows = []
    for r in reports:
        status = "passed" if r.passed else "failed"
        kind = ("structural" if not r.deep else "deep, no expectation suite (state read, not checked)"
                if r.suite_skipped else "deep")
        details = "".join(
            f"<li class='{c.status.value}'>{html.escape(c.name)}: {html.escape(c.message)}"
            + (f" <code>{html.escape(c.file)}</code>" if c.file else "") + "</li>"
            for c in r.checks if c.status.value != "passed"
        ) or "<li class='passed'>every check passed</li>"
        rows.append(
            f"<tr><td>{r.checkpoint_id}</td><td class='{status}'>{status}</td><td>{kind}"
            f"</td><td>{html.escape(r.finished.astimezone(UTC).isoformat(timespec='seconds'))}</td>"
            f"<td>{sum(c.passed for c in r.checks)}/{len(r.checks)}</td><td><ul>{details}</ul></td></tr>")
    failed = sum(not r.passed for r in reports)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>barrierflow verification: "
        f"{html.escape(pipeline)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Checkpoint verification: {html.escape(pipeline)}</h1>"
        f"<p>{len(reports)} checkpoints, {failed} failed; generated "
        f"{datetime.now(UTC).isoformat(timespec='seconds')}</p>"
        "<table><tr><th>checkpoint</th><th>result</th><th>kind</th><th>finished (UTC)</th>"
        f"<th>checks passed</th><th>problems</th></tr>{''.join(rows)}</table></body></html>"
    )
