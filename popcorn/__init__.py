"""popcorn: validated, measured, dispatched GPU kernels behind pure-PyTorch references.

This module wires the layers together (schema <- core <- kernels | dispatch <- bench <- cli): the op
registry in core calls the dispatcher and the bench harness through hooks installed here, and
dispatch hears of new evidence through core's events, so no layer imports one above it.
"""

__version__ = "0.1.0"

from popcorn.core import events, registry  # noqa: E402
from popcorn.dispatch import _dispatch, explain, forget, use  # noqa: E402


def _harness(name: str):
    import popcorn.bench.api as api  # on first use: `import popcorn` stays free of the bench layer

    return getattr(api, name)


registry.install(dispatcher=_dispatch, harness=_harness)
events.on_evidence_changed(forget)

__all__ = ["explain", "use"]
