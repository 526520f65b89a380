"""A job's local work directory: its layout (:mod:`.layout`), the liveness of the local
processes named in it (:mod:`.processes`) and the records of a detached launch
(:mod:`.launches`). The lease that keeps a second process of the same pipeline out lives in
the checkpoint store: :mod:`barrierflow.lease`."""
