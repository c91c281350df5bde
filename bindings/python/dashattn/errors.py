"""Exceptions raised by dashattn.

Every error from the C++ core arrives as one of these, with the core's message (which names the offending
argument and the expected value) and two attributes: ``code`` (``"invalid_argument"``, ``"unsupported"``, ...)
and ``argument`` (the argument, backend or file the error is about). Each class also derives from the built-in
exception a Python user would expect, so ``except ValueError`` keeps working.
"""

__all__ = [
    "DashattnError",
    "InvalidArgumentError",
    "DTypeError",
    "UnsupportedError",
    "BackendUnavailableError",
    "DashattnIOError",
    "OutOfMemoryError",
    "InternalError",
    "BackwardNotAvailableError",
]


class DashattnError(Exception):
    """Base class of every dashattn error."""

    code = "error"
    argument = ""


class InvalidArgumentError(DashattnError, ValueError):
    """A shape, stride, length or parameter value the contract does not allow."""


class DTypeError(DashattnError, TypeError):
    """An array of a dtype the call does not accept."""


class UnsupportedError(DashattnError, RuntimeError):
    """Valid input that the chosen backend cannot run (for example a head dim a GPU backend was not built for)."""


class BackendUnavailableError(DashattnError, RuntimeError):
    """The backend is unknown, not compiled into this build, or has no device."""


class DashattnIOError(DashattnError, OSError):
    """A tensor file is missing, malformed or inconsistent."""


class OutOfMemoryError(DashattnError, MemoryError):
    """An allocation made by the library failed."""


class InternalError(DashattnError, RuntimeError):
    """A runtime failure inside a backend (a CUDA error, for example)."""


class BackwardNotAvailableError(DashattnError, RuntimeError):
    """Autograd reached DashAttention on a backend that has no backward pass (training support comes later)."""

    code = "unsupported"
