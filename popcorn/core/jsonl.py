"""Reading JSON-lines record files line by line, so one damaged line costs that line alone.

A cache file can hold a torn write, bytes of another encoding or a record of another schema.
Readers (dispatch, merge, view) take every readable line and name each one they skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def json_lines(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """``(line number, object, None)`` for each JSON object line of ``path``, ``(line number, None, why)``
    for each line that is not one (bad bytes, bad JSON, not an object); blank lines are skipped."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield n, None, f"not UTF-8 text ({e.reason} at byte {e.start})"
                continue
            try:
                obj = json.loads(text)
            except ValueError as e:
                yield n, None, f"not JSON ({e})"
                continue
            if not isinstance(obj, dict):
                yield n, None, f"not a record (a JSON {type(obj).__name__})"
                continue
            yield n, obj, None
