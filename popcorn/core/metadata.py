"""Op metadata parsed from the reference docstring: summary, LaTeX math, citations."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
_CITE = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")

# The one taxonomy of op tags, shared by the catalog and the explorer.
TAGS = frozenset({
    "normalization", "activation", "attention", "loss", "reduction", "positional", "linear",
    "fused", "varlen", "embedding", "sequence mixer", "feature mixer",
})


@dataclass(frozen=True)
class Metadata:
    summary: str
    math: str
    citations: tuple[tuple[str, str], ...]
    tags: tuple[str, ...]


def parse(name: str, doc: str | None, tags=()) -> Metadata:
    """Parse ``doc``: a one-line summary ending in '.', one ``$$...$$`` block, optional ``[label](url)``s."""
    doc = inspect.cleandoc(doc or "")
    summary = doc.split("\n\n", 1)[0].strip()
    if not summary or "\n" in summary or not summary.endswith("."):
        raise ValueError(f"{name}: the docstring must open with a one-line summary ending in '.', got {summary!r}")
    math = _MATH.search(doc)
    if not math:
        raise ValueError(f"{name}: the docstring needs one $$...$$ LaTeX block stating the math")
    unknown = sorted(set(tags) - TAGS)
    if unknown:
        raise ValueError(f"{name}: unknown tags {unknown}; known: {sorted(TAGS)}")
    return Metadata(summary, " ".join(math.group(1).split()), tuple(_CITE.findall(doc)), tuple(tags))
