"""Grad mode: one process-wide switch that says whether ops record a graph.

It sits apart from everything else (it imports nothing from minigrad), so ``tensor.py`` and
``function.py`` can both read it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class _State:
    """A mutable holder: ``from minigrad.grad_mode import state`` sees every later change."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = True


state = _State()


def is_grad_enabled() -> bool:
    return state.enabled


def set_grad_enabled(mode: bool) -> None:
    state.enabled = bool(mode)


class _GradMode:
    """Context manager *and* decorator, like torch.no_grad / torch.enable_grad."""

    mode = True

    def __enter__(self) -> None:
        self._prev = state.enabled
        state.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        state.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return fn(*args, **kwargs)

        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__doc__ = fn.__doc__
        return wrapper


class no_grad(_GradMode):  # noqa: N801  (torch's name)
    """Ops run inside build no graph."""

    mode = False


class enable_grad(_GradMode):  # noqa: N801
    mode = True


@contextmanager
def grad_mode(mode: bool) -> Iterator[None]:
    prev = state.enabled
    state.enabled = mode
    try:
        yield
    finally:
        state.enabled = prev
