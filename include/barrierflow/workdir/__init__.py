"""A job's local work directory: its layout (:mod:`.layout`) and the lease that keeps a
second job of the same pipeline out of it (:mod:`.lease`)."""
