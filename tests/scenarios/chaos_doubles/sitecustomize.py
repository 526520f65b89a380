"""Deliberately broken Parquet sinks that ``barrierflow chaos`` must catch (tests/scenarios/test_chaos.py).

On ``PYTHONPATH``, Python imports this module in every process it starts, so the pipeline runs
that chaos starts get the broken sinks. ``CHAOS_BROKEN_SINKS`` maps sink names to defects
(``dup=twice,lose=lose``) and ``CHAOS_BROKEN_DIR`` is where each sink records the processes
that built it. Both defects strike only in a process that is a restart (another process built
the same pipeline's sink before), so a failure-free run, the reference, is correct:

* ``twice``: every commit publishes each file a second time under another part name (a sink
  that commits an epoch twice);
* ``lose``: the first commit of the process with files to publish publishes nothing and reports
  success (a sink that loses an epoch, e.g. the restarted job's commit of the in-doubt epoch).
"""

from __future__ import annotations

import os

_DEFECTS = dict(item.split("=", 1) for item in os.environ.get("CHAOS_BROKEN_SINKS", "").split(",") if "=" in item)

if _DEFECTS:
    from pathlib import Path

    from barrierflow.sinks import parquet

    _original_init = parquet.ParquetFileSink.__init__
    _original_commit = parquet.ParquetFileSink.commit

    def _init(self, **kwargs):  # type: ignore[no-untyped-def]
        _original_init(self, **kwargs)
        self._chaos_defect = _DEFECTS.get(self.name)
        if self._chaos_defect:
            book = Path(os.environ["CHAOS_BROKEN_DIR"]) / f"{self.pipeline}.{self.name}"
            book.parent.mkdir(parents=True, exist_ok=True)
            before = set(book.read_text().split()) if book.exists() else set()
            self._chaos_restart = bool(before - {str(os.getpid())})
            with book.open("a") as out:
                out.write(f"{os.getpid()}\n")
            self._chaos_lost = False

    def _commit(self, txn):  # type: ignore[no-untyped-def]
        defect = getattr(self, "_chaos_defect", None)
        if not defect or not self._chaos_restart:
            return _original_commit(self, txn)
        if defect == "lose" and not self._chaos_lost and any(txn.handle.get("files", {}).values()):
            self._chaos_lost = True
            return None
        _original_commit(self, txn)
        if defect == "twice":
            for batch in txn.batches:
                for index, _key in enumerate(txn.handle.get("files", {}).get(str(batch), [])):
                    target = parquet.final_key(batch, txn.attempt, index)
                    if self.output.exists(target):
                        self.output.put_bytes(parquet.final_key(batch, txn.attempt + 900, index),
                                              self.output.get_bytes(target))
        return None

    parquet.ParquetFileSink.__init__ = _init
    parquet.ParquetFileSink.commit = _commit
