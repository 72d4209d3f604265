"""A case: one concrete call of an op, and its stable id."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)
class Case:
    """Dims, variadic batch, dtype name, scalar args and present optional tensors of one call."""

    dims: dict[str, int]
    batch: tuple[int, ...] = ()
    dtype: str = "float32"
    args: dict = field(default_factory=dict)
    present: tuple[str, ...] = ()

    def config(self) -> dict:
        """The canonical JSON-able form stored in records."""
        return {
            "args": dict(sorted(self.args.items())),
            "batch": list(self.batch),
            "dims": dict(sorted(self.dims.items())),
            "dtype": self.dtype,
            "present": sorted(self.present),
        }

    @classmethod
    def from_config(cls, config: dict) -> Case:
        return cls(dict(config["dims"]), tuple(config["batch"]), config["dtype"], dict(config["args"]),
                   tuple(config["present"]))

    @functools.cached_property  # plans hash tens of thousands of cases; a Case never changes
    def case_id(self) -> str:
        c = self.config()
        key = [sorted(c["dims"].items()), c["batch"], c["dtype"], sorted(c["args"].items()), c["present"]]
        return hashlib.sha1(json.dumps(key, default=repr).encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.dims.items())]
        if self.batch:
            parts.append(f"batch=({','.join(map(str, self.batch))},)" if len(self.batch) == 1
                         else f"batch=({','.join(map(str, self.batch))})")
        parts.append(self.dtype)
        parts += [f"{k}={v}" for k, v in sorted(self.args.items())]
        parts += [f"+{p}" for p in sorted(self.present)]
        return ",".join(parts)

    def __eq__(self, other) -> bool:
        return isinstance(other, Case) and self.config() == other.config()

    def __hash__(self) -> int:
        return hash(self.case_id)

    def __repr__(self) -> str:
        return f"Case({self.label})"
