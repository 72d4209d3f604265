"""Errors a user of popcorn can meet, each naming what was wrong and what to do."""


class DispatchError(TypeError):
    """A call does not fit an op's contract, or no backend can serve it."""


class BackendUnavailable(DispatchError, ImportError):
    """A backend's package is missing or outside its supported version range."""
