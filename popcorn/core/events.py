"""Evidence-changed notifications: the store tells whoever listens (dispatch's memo) that an op has
new rows, without importing the layer that listens (bench sits above dispatch; neither reaches in)."""

from __future__ import annotations

from typing import Callable

_LISTENERS: list[Callable[[str | None], None]] = []


def on_evidence_changed(listener: Callable[[str | None], None]) -> None:
    """Call ``listener(op_name)`` (None: every op) whenever evidence changes."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def evidence_changed(op_name: str | None = None) -> None:
    for listener in _LISTENERS:
        listener(op_name)
