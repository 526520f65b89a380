"""The ``metrics:`` block of a spec: where a running ``barrierflow run`` serves ``/metrics``.

Off unless the block is given. ``port: 0`` binds any free port; the address actually bound is
logged and written to ``<work_dir>/metrics.json`` (:mod:`barrierflow.metrics.server`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MetricsSpec"]


class MetricsSpec(BaseModel):
    """Serve Prometheus metrics at ``http://<host>:<port>/metrics`` while the pipeline runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    host: str = Field("127.0.0.1", min_length=1,
                      description="address to bind; 0.0.0.0 to be scraped from other hosts")
    port: int = Field(..., ge=0, le=65535, description="TCP port; 0 = any free port (written to the work dir)")
