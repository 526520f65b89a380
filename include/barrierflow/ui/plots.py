"""Plots of the Checkpoints page, as self-contained SVG (matplotlib, no internet resources).

* :func:`history_svg`: per completed checkpoint, the phase durations (barrier batch, sync,
  async, total; ms) and the sizes (full and incremental; bytes), failed checkpoints marked.
* :func:`skew_svg`: from the stored skew report (``reports/skew-latest.json``), the skew per
  checkpoint, with the configured ``max_skew`` as a line (lags are in the report itself: they
  can be orders of magnitude larger and would flatten the skew).

Both return the SVG document as text; :func:`data_uri` turns it into an ``<img src>``.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from barrierflow.ui.history import CutRow

_FAILED = "#b00020"


def _svg(figure: Any) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    FigureCanvasSVG(figure)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buffer.getvalue()


def data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _integer_ticks(axes: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def history_svg(rows: list[CutRow]) -> str:
    """Durations and sizes over cut ids (any order in, plotted ascending): the cut's total ms
    and, summed over its stages, barrier batch, sync and async ms and full and incremental bytes."""
    from matplotlib.figure import Figure

    done = sorted((r for r in rows if r.completed), key=lambda r: r.checkpoint_id)
    failed = sorted(r.checkpoint_id for r in rows if not r.completed)
    ids = [r.checkpoint_id for r in done]

    def total(row: CutRow, field: str) -> float:
        return float(sum(getattr(s, field) or 0 for s in row.stages))

    figure = Figure(figsize=(9, 5.5))
    durations, sizes = figure.subplots(2, 1, sharex=True)
    for label, values in (("barrier batch", [total(r, "barrier_batch_ms") for r in done]),
                          ("sync", [total(r, "sync_ms") for r in done]),
                          ("async", [total(r, "async_ms") for r in done]), ("total", [r.total_ms for r in done])):
        durations.plot(ids, values, marker="o", markersize=3, label=label)
    if failed:
        durations.scatter(failed, [0] * len(failed), marker="x", color=_FAILED, label="failed", zorder=3)
    durations.set_ylabel("ms")
    durations.set_title("Checkpoint durations")
    durations.legend(fontsize="small", ncol=5)
    durations.grid(alpha=0.3)
    sizes.plot(ids, [total(r, "full_bytes") / 1024 for r in done], marker="o", markersize=3, label="full")
    sizes.plot(ids, [total(r, "incremental_bytes") / 1024 for r in done], marker="o", markersize=3,
               label="incremental (uploaded)")
    sizes.set_ylabel("KiB")
    sizes.set_xlabel("checkpoint")
    _integer_ticks(sizes)
    sizes.set_title("Checkpoint sizes")
    sizes.legend(fontsize="small")
    sizes.grid(alpha=0.3)
    return _svg(figure)


def skew_svg(report: dict[str, Any]) -> str | None:
    """Skew per checkpoint of a stored skew report; None if it has no checkpoints."""
    from matplotlib.figure import Figure

    points = report.get("checkpoints") or []
    if not points:
        return None
    figure = Figure(figsize=(9, 3))
    axes = figure.add_subplot()
    known = [(p["checkpoint_id"], p["skew_seconds"]) for p in points if p.get("skew_seconds") is not None]
    axes.plot([c for c, _ in known], [v for _, v in known], marker="o", markersize=3, label="skew (newest - oldest)")
    limit = (report.get("settings") or {}).get("max_skew_seconds")
    if limit is not None:
        axes.axhline(limit, color=_FAILED, linestyle="--", label=f"max_skew {limit:g}s")
    axes.set_xlabel("checkpoint")
    _integer_ticks(axes)
    axes.set_ylabel("seconds")
    axes.set_title(f"Watermark skew (report generated {report.get('generated', '?')})")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    return _svg(figure)
