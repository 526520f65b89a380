"""The base of every spec model: unknown fields refused, values frozen, inputs never echoed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A spec model that forbids unknown fields (a typo is an error naming the field), is
    immutable, and whose validation errors never repeat what was given (a password given
    literally is refused without being shown; the loader's messages say what is wrong)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
