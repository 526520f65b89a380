"""Object storage backends (local directory, S3) behind one interface."""

from barrierflow.storage.object_store import (
    ConditionalWriteUnsupportedError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
)
from barrierflow.storage.uri import local_path_of, open_store

__all__ = ["ConditionalWriteUnsupportedError", "ObjectInfo", "ObjectNotFoundError", "ObjectStore", "local_path_of",
           "open_store"]
