"""Restoring a job from a completed checkpoint, and finishing in-doubt sink transactions."""
