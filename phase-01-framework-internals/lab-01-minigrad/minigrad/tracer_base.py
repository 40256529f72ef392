"""What every module may need to know about tracing without importing the tracer.

:mod:`minigrad.tracing` builds on :class:`~minigrad.tensor.Tensor`, so Tensor (and the ops
below it) cannot import it. They recognise a traced value with :func:`is_tracer`, which tests
for the :class:`Traced` marker every ``Tracer`` carries, and raise :class:`TracingError`.
This module imports nothing from minigrad.
"""

from __future__ import annotations

from typing import Any


class TracingError(RuntimeError):
    """Something a trace cannot represent (a data-dependent shape or Python branch)."""


class Traced:
    """The marker base of ``minigrad.tracing.Tracer`` (no state of its own)."""

    __slots__ = ()


def is_tracer(x: Any) -> bool:
    """Is ``x`` a value being traced by a transformation (vmap, grad, jvp, jit)?"""
    return isinstance(x, Traced)
