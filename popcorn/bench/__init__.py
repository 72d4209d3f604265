"""The harness: correctness, timing, memory, records, the user cache and their text reports."""

from .compare import Result
from .record import Record
from .report import report
from .compare import compare

__all__ = ["Record", "Result", "compare", "report"]
