"""The ``barrierflow`` command line."""
