"""Tensor's in-place operations and Python-scalar conversions, with torch's semantics.

A mixin of :class:`minigrad.tensor.Tensor` (kept apart only for the size of tensor.py). It
imports no op: the primitives are looked up by name in :data:`minigrad.rules.PRIMITIVES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from minigrad.grad_mode import state as _grad_mode
from minigrad.rules import PRIMITIVES

if TYPE_CHECKING:
    from minigrad.tensor import Tensor


class InPlaceOps:
    """``+=``, ``add_``, ..., ``zero_``; ``float()``, ``int()``, ``format()``."""

    __slots__ = ()

    # ----------------------------------------------------------------- Python scalars
    def __float__(self) -> float:
        return float(self._one_element("float"))

    def __int__(self) -> int:
        return int(self._one_element("int"))

    def __index__(self) -> int:
        if self.data.dtype.kind not in "iub":
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self._one_element("index"))

    def __format__(self, spec: str) -> str:
        # as torch: a 0-dim tensor formats as its value; anything else as its repr, and only
        # with an empty format spec
        if self.data.ndim == 0:
            return self.data.item().__format__(spec)
        return object.__format__(self, spec)

    def _one_element(self, what: str) -> Any:
        if self.data.size != 1:
            raise ValueError(
                f"only one element tensors can be converted to Python scalars ({what}() of a "
                f"tensor of shape {self.shape})"
            )
        return self.data.item()

    # ----------------------------------------------------------------- in-place ops
    def _check_inplace(self, other: Any = None) -> None:
        """For the ops minigrad never records (zero_, fill_, copy_): only outside the graph,
        and never on a traced tensor (the write would change one representative array)."""
        if getattr(type(self), "_traced", False) or getattr(type(other), "_traced", False):
            from minigrad.tracing import TracingError

            raise TracingError(
                "zero_/fill_/copy_ inside a transformation (vmap, grad, jit) are not recorded; "
                "use an out-of-place op (zeros_like, where, ...)"
            )
        if _grad_mode.enabled and (self._rg or (isinstance(other, InPlaceOps) and other._rg)):
            raise RuntimeError(
                "minigrad does not record this in-place operation: a tensor that requires grad "
                "was modified in place with grad enabled; use an out-of-place op or no_grad()"
            )

    def _bump(self) -> Tensor:
        self._vc[0] += 1
        return self

    def _inplace(self, op: str, other: Any, alpha: float = 1.0) -> Tensor:
        """``self <op>= other`` with torch's semantics.

        Outside the graph (no_grad, or nothing requires grad) the array is updated in place and
        the version bumps, so every node that saved this tensor (or a view of it) notices. On a
        leaf that requires grad, with grad enabled, it is torch's error. On a non-leaf (or when
        ``other`` requires grad) the op is recorded: the tensor takes the result's value and
        grad_fn, and a new version, so nodes that saved the old value refuse to backward, as in
        torch. Unlike torch, views taken before keep the old value there, and a recorded in-place op
        on a view is refused (torch would rewrite its base's history).
        """
        primitive = PRIMITIVES[op]
        if getattr(type(self), "_traced", False) or getattr(type(other), "_traced", False):
            return self._inplace_traced(primitive, other if alpha == 1.0 else other * alpha)
        o = other.data if isinstance(other, InPlaceOps) else other
        if alpha != 1.0:
            o = alpha * o
        recording = _grad_mode.enabled and (
            self._rg or (isinstance(other, InPlaceOps) and other._rg)
        )
        if not recording:
            result = primitive.forward(_Scratch(), self.data, o)
            if result.dtype != self.data.dtype and not np.can_cast(
                result.dtype, self.data.dtype, "same_kind"
            ):
                raise RuntimeError(
                    f"result type {result.dtype} can't be cast to the desired output type "
                    f"{self.dtype}"
                )
            try:
                self.data[...] = result
            except ValueError:
                raise RuntimeError(
                    f"output with shape {self.shape} doesn't match the broadcast shape "
                    f"{np.shape(result)}"
                ) from None
            return self._bump()
        if self.grad_fn is None and self._rg:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
        if getattr(self, "_view", False):
            # torch rewrites the base's history (CopySlices); minigrad would update only the
            # view, leaving the base's value and gradient silently wrong, so it refuses
            raise RuntimeError(
                "minigrad does not record an in-place operation on a view (indexing, "
                "transpose, expand, ...) of a tensor in the graph; use an out-of-place op, "
                "or clone() the view first"
            )
        old = self._wrap(self.data, self.grad_fn)
        old._rg, old._vc = self._rg, self._vc
        result = primitive.apply(old, other if alpha == 1.0 else other * alpha)
        if result.shape != self.shape:
            raise RuntimeError(
                f"output with shape {self.shape} doesn't match the broadcast shape {result.shape}"
            )
        self.data, self.grad_fn, self._rg = result.data, result.grad_fn, True
        self._vc = [self._vc[0] + 1]
        return self

    def _inplace_traced(self, primitive: type, other: Any) -> Tensor:
        """Inside a transformation (vmap, grad, jit): the op is recorded and the tracer takes
        the result's place, so the update is part of the traced program (NumPy on the
        representative array would change one example and record nothing)."""
        from minigrad.tracing import TracingError

        if not getattr(type(self), "_traced", False) or getattr(self, "_view", False):
            what = (
                "a view (indexing, reshape, ...)"
                if getattr(self, "_view", False)
                else ("a tensor that is not traced, with a traced operand")
            )
            raise TracingError(
                f"in-place operation on {what} inside a transformation is not supported; "
                "use an out-of-place op"
            )
        result = primitive.apply(self, other)
        if result.shape != self.shape:
            raise RuntimeError(
                f"output with shape {self.shape} doesn't match the broadcast shape {result.shape}"
            )
        if result.dtype != self.dtype:
            if not np.can_cast(result.dtype, self.dtype, "same_kind"):
                raise RuntimeError(
                    f"result type {result.dtype} can't be cast to the desired output type "
                    f"{self.dtype}"
                )
            result = PRIMITIVES["Cast"].apply(result, self.dtype)
        self.data, self._trace, self._var = result.data, result._trace, result._var
        return self

    def __iadd__(self, other: Any) -> Tensor:
        return self._inplace("Add", other)

    def __isub__(self, other: Any) -> Tensor:
        return self._inplace("Sub", other)

    def __imul__(self, other: Any) -> Tensor:
        return self._inplace("Mul", other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self._inplace("Div", other)

    def add_(self, other: Any, alpha: float = 1.0) -> Tensor:
        return self._inplace("Add", other, alpha)

    def sub_(self, other: Any, alpha: float = 1.0) -> Tensor:
        return self._inplace("Sub", other, alpha)

    def mul_(self, other: Any) -> Tensor:
        return self._inplace("Mul", other)

    def div_(self, other: Any) -> Tensor:
        return self._inplace("Div", other)

    def zero_(self) -> Tensor:
        self._check_inplace()
        self.data[...] = 0
        return self._bump()

    def fill_(self, value: float) -> Tensor:
        self._check_inplace()
        self.data[...] = value
        return self._bump()

    def copy_(self, src: Any) -> Tensor:
        self._check_inplace(src)
        self.data[...] = src.data if isinstance(src, InPlaceOps) else src
        return self._bump()


class _Scratch:
    """A throwaway ctx for calling a primitive's forward directly on arrays."""

    def save_for_backward(self, *tensors: Any) -> None:
        pass
