"""A job's local work directory: its layout (:mod:`.layout`) and the liveness of the local
processes named in it (:mod:`.processes`). The lease that keeps a second process of the same
pipeline out lives in the checkpoint store: :mod:`barrierflow.lease`."""
