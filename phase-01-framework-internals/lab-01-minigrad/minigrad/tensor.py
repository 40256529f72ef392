"""The Tensor: an ``np.ndarray`` plus the autograd bookkeeping (grad, grad_fn, version).

Tensor knows no derivative rule. Every method below forwards to a ``Primitive`` in
:mod:`minigrad.ops`; the engine (:mod:`minigrad.engine`) walks the ``grad_fn`` graph.

The one seam in the import graph: ops and the engine are built on Tensor, so this module
cannot import them. It holds two module references, ``ops`` and ``engine``, that
``minigrad/__init__.py`` fills in (:func:`bind`) once both exist. Everything else imports
strictly downwards: grad_mode, rules, tracer_base <- tensor <- tracing <- function <- engine,
ops <- nn, optim.

The class reads in order: construction and autograd state, accessors, the differentiable ops
(operators and methods), Python-scalar conversions, then the in-place ops with torch's
semantics (a ``Tracer`` overrides ``_inplace`` to record them instead).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad.grad_mode import state as _mode
from minigrad.rules import PRIMITIVES, RuleCtx
from minigrad.tracer_base import TracingError, is_tracer

# Filled in by bind() (see the module docstring); typed Any so that no import is needed.
ops: Any = None
engine: Any = None


def bind(ops_module: Any, engine_module: Any) -> None:
    """Connect Tensor's methods to the ops and the engine (called once, by minigrad/__init__)."""
    global ops, engine
    ops, engine = ops_module, engine_module


MaxResult = namedtuple("MaxResult", ["values", "indices"])

# torch options minigrad takes only at the value that means "as minigrad always does".
_ACCEPTED = {
    "device": ("cpu", None),
    "layout": ("torch.strided", None),
    # a memory format picks strides, never values, and minigrad shows no strides
    "memory_format": (
        "torch.preserve_format",
        "torch.contiguous_format",
        "torch.channels_last",
        "torch.channels_last_3d",
        None,
    ),
    "pin_memory": (False, None),
    "non_blocking": (False, True),  # on the CPU a copy is never asynchronous
    "out": (None,),
}


def check_torch_options(where: str, **options: Any) -> None:
    """Refuse (TypeError) a torch option minigrad does not support, e.g. ``device="cuda"``;
    accept the values that mean what minigrad does anyway (``device="cpu"``)."""
    for name, value in options.items():
        if name not in _ACCEPTED:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        shown = value if value is None or isinstance(value, bool) else str(value)
        if shown not in _ACCEPTED[name]:
            raise TypeError(
                f"{where}: {name}={value!r} is not supported by minigrad "
                f"(minigrad runs NumPy on the CPU; accepted: {_ACCEPTED[name]})"
            )


def _as_array(data: Any, dtype: Any = None) -> np.ndarray:
    """Lists and Python scalars become float32 (as in torch); ndarrays keep their dtype."""
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, np.ndarray):
        return data if dtype is None else data.astype(dtype, copy=False)
    if isinstance(data, np.generic):
        return np.asarray(data, dtype=dtype)
    arr = np.asarray(data, dtype=dtype)
    if dtype is None:
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot build a tensor from {type(data).__name__} ({arr.dtype})")
    return arr


class Tensor:
    """A NumPy array that records how it was computed (``grad_fn``) when grad is enabled."""

    # __slots__ keeps creation cheap: one Tensor is made per op on the hot path.
    # ``_view`` is set (only) on a view made by an op; unset reads as False via getattr.
    __slots__ = (
        "data",
        "grad",
        "grad_fn",
        "_requires_grad",
        "_version_counter",
        "_view",
        "__weakref__",
    )
    # Make ``ndarray <op> Tensor`` defer to our reflected operators instead of broadcasting
    # the Tensor as an object array.
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None) -> None:
        self.data: np.ndarray = _as_array(data, dtype)
        self.grad: Tensor | None = None
        self.grad_fn = None
        self._requires_grad = False
        # The version counter is a one-element list so that views can share it.
        self._version_counter = [0]
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, arr: np.ndarray, grad_fn: Any = None) -> Tensor:
        """Fast internal constructor: no conversion, no checks."""
        t = object.__new__(Tensor)
        t.data = arr
        t.grad = None
        t.grad_fn = grad_fn
        t._requires_grad = grad_fn is not None
        t._version_counter = [0]
        return t

    # ----------------------------------------------------------------- autograd state
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self.data.dtype.kind != "f":
            raise RuntimeError(
                f"only floating-point tensors can require gradients (this one is {self.dtype})"
            )
        if not value and self.grad_fn is not None:
            raise RuntimeError(
                "you can only change requires_grad of leaf tensors; use .detach() instead"
            )
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        return self._version_counter[0]

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
    ) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see minigrad.engine)."""
        engine.backward([self], [gradient], retain_graph, create_graph)

    def detach(self) -> Tensor:
        if is_tracer(self):  # keep it traced (per example, per call)
            return ops.StopGradient.apply(self)
        t = Tensor._wrap(self.data)
        t._version_counter = self._version_counter  # same memory, same version counter
        return t

    # ----------------------------------------------------------------- plain accessors
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def size(self, dim: int | None = None) -> Any:
        return self.data.shape if dim is None else self.data.shape[dim]

    def numel(self) -> int:
        return self.data.size

    def numpy(self) -> np.ndarray:
        if self._requires_grad:
            raise RuntimeError(
                "can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()"
            )
        return self.data

    def item(self) -> float:
        if self.data.size != 1:
            raise ValueError(f"item() needs a one-element tensor, this one has shape {self.shape}")
        return self.data.item()

    def tolist(self) -> Any:
        return self.data.tolist()

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        extra = ""
        if self.grad_fn is not None:
            extra = f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self._requires_grad:
            extra = ", requires_grad=True"
        return f"tensor({np.array2string(self.data, separator=', ')}, dtype={self.dtype}{extra})"

    # ----------------------------------------------------------------- differentiable ops
    def __add__(self, other: Any) -> Tensor:
        return ops.Add.apply(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return ops.Add.apply(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return ops.Sub.apply(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return ops.Sub.apply(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return ops.Mul.apply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return ops.Mul.apply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return ops.Div.apply(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return ops.Div.apply(other, self)

    __rdiv__ = __rtruediv__  # torch's name for it

    def __neg__(self) -> Tensor:
        return ops.Neg.apply(self)

    def __pow__(self, exponent: Any) -> Tensor:
        return ops.Pow.apply(self, exponent)

    def __rpow__(self, base: Any) -> Tensor:
        return ops.Pow.apply(base, self)

    def __matmul__(self, other: Any) -> Tensor:
        return ops.MatMul.apply(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return ops.MatMul.apply(other, self)

    def __getitem__(self, key: Any) -> Tensor:
        return ops.Index.apply(self, key)

    # Comparisons are not differentiable: they return plain boolean arrays.
    def __gt__(self, other: Any) -> np.ndarray:
        return self.data > (other.data if isinstance(other, Tensor) else other)

    def __lt__(self, other: Any) -> np.ndarray:
        return self.data < (other.data if isinstance(other, Tensor) else other)

    def __ge__(self, other: Any) -> np.ndarray:
        return self.data >= (other.data if isinstance(other, Tensor) else other)

    def __le__(self, other: Any) -> np.ndarray:
        return self.data <= (other.data if isinstance(other, Tensor) else other)

    def __eq__(self, other: Any) -> np.ndarray:  # type: ignore[override]  (elementwise, as torch)
        return self.data == (other.data if isinstance(other, Tensor) else other)

    def __ne__(self, other: Any) -> np.ndarray:  # type: ignore[override]
        return self.data != (other.data if isinstance(other, Tensor) else other)

    # Hashing stays by identity, so Tensors remain usable as dict keys (dicts test ``is``
    # before ``==``); the engine keys by node or id anyway.
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError(
                "Boolean value of Tensor with more than one value is ambiguous "
                f"(shape {self.shape})"
            )
        return bool(self.data)

    def add(self, other: Any, alpha: float = 1) -> Tensor:
        return ops.Add.apply(self, other if alpha == 1 else other * alpha)

    def sub(self, other: Any, alpha: float = 1) -> Tensor:
        return ops.Sub.apply(self, other if alpha == 1 else other * alpha)

    def mul(self, other: Any) -> Tensor:
        return ops.Mul.apply(self, other)

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        """True division, or with ``rounding_mode`` "trunc" / "floor" the rounded quotient."""
        if rounding_mode is not None:
            return ops.RoundedDiv.apply(self, other, rounding_mode)
        return ops.Div.apply(self, other)

    def true_divide(self, other: Any) -> Tensor:
        return ops.Div.apply(self, other)

    def neg(self) -> Tensor:
        return ops.Neg.apply(self)

    def pow(self, exponent: Any) -> Tensor:
        return ops.Pow.apply(self, exponent)

    def matmul(self, other: Any) -> Tensor:
        return ops.MatMul.apply(self, other)

    def exp(self) -> Tensor:
        return ops.Exp.apply(self)

    def log(self) -> Tensor:
        return ops.Log.apply(self)

    def tanh(self) -> Tensor:
        return ops.Tanh.apply(self)

    def sigmoid(self) -> Tensor:
        return ops.Sigmoid.apply(self)

    def relu(self) -> Tensor:
        return ops.ReLU.apply(self)

    def erf(self) -> Tensor:
        return ops.Erf.apply(self)

    def abs(self) -> Tensor:
        return ops.Abs.apply(self)

    def sqrt(self) -> Tensor:
        return ops.Sqrt.apply(self)

    def rsqrt(self) -> Tensor:
        return ops.Rsqrt.apply(self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002  (torch's names)
        return ops.Clamp.apply(self, min, max)

    clip = clamp

    def maximum(self, other: Any) -> Tensor:
        return ops.Maximum.apply(self, other)

    def minimum(self, other: Any) -> Tensor:
        return ops.Minimum.apply(self, other)

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        return ops.MaskedFill.apply(self, ops.index_arg(mask), value)

    def gather(self, dim: int, index: Any) -> Tensor:
        return ops.gather(self, dim, index)

    def index_select(self, dim: int, index: Any) -> Tensor:
        return ops.index_select(self, dim, index)

    def split(self, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
        return ops.split(self, split_size, dim)

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        return ops.split(self, list(split_sizes), dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        return ops.chunk(self, chunks, dim)

    def var(self, *args: Any, **kwargs: Any) -> Tensor:
        """torch's overloads: ``var(unbiased=True)``, ``var(dim, unbiased=True,
        keepdim=False)`` and ``var(dim=None, *, correction=None, keepdim=False)``
        (correction None is 1; unbiased=False is correction 0)."""
        dim, correction, keepdim = _variance_args("var", args, kwargs)
        return ops.Var.apply(self, dims_to_axis(dim, self.ndim), correction, keepdim)

    def std(self, *args: Any, **kwargs: Any) -> Tensor:
        """As var, then the square root (torch.std's overloads)."""
        dim, correction, keepdim = _variance_args("std", args, kwargs)
        return ops.std_from_var(
            ops.Var.apply(self, dims_to_axis(dim, self.ndim), correction, keepdim)
        )

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Tensor:
        return ops.LogSumExp.apply(self, dims_to_axis(dim, self.ndim), keepdim)

    def sum(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return ops.Sum.apply(self, dims_to_axis(dim, self.ndim), keepdim)

    def mean(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return ops.Mean.apply(self, dims_to_axis(dim, self.ndim), keepdim)

    def amax(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        """As torch.amax: ``dim`` may be a tuple; tied maxima share the gradient evenly."""
        return ops.AMax.apply(self, dims_to_axis(dim, self.ndim), keepdim, False)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """As torch: the maximum value (ties share the gradient evenly), ``(values, indices)``
        along ``dim`` (the gradient goes to the first arg-max), or with a tensor in place of
        ``dim`` the elementwise maximum (torch's ``max(input, other)`` overload)."""
        if isinstance(dim, Tensor):
            return ops.Maximum.apply(self, dim)
        if dim is None:
            return ops.AMax.apply(self, None, False, True)  # a NaN is the max, as torch
        axis = dims_to_axis(dim, self.ndim)
        values = ops.Max.apply(self, axis, keepdim)
        return MaxResult(values, ops.arg_max(self, axis, keepdim))

    def amin(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return -(-self).amax(dim, keepdim)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        """As max: the minimum value, ``(values, indices)`` along ``dim``, or the elementwise
        minimum with a tensor."""
        if isinstance(dim, Tensor):
            return ops.Minimum.apply(self, dim)
        if dim is None:
            return -(-self).max()
        values = -ops.Max.apply(-self, dims_to_axis(dim, self.ndim), keepdim)
        return MaxResult(values, ops.arg_max(self, dims_to_axis(dim, self.ndim), keepdim, False))

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        axis = None if dim is None else dims_to_axis(dim, self.ndim)
        return ops.arg_max(self, axis, keepdim, largest=False)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        axis = None if dim is None else dims_to_axis(dim, self.ndim)
        return ops.arg_max(self, axis, keepdim)

    def softmax(self, dim: int, dtype: Any = None) -> Tensor:
        """As torch: ``dtype`` casts the input first (e.g. softmax of float32 in float64)."""
        x = self if dtype is None else self.to(dtype)
        return ops.Softmax.apply(x, dims_to_axis(dim, x.ndim))

    def log_softmax(self, dim: int, dtype: Any = None) -> Tensor:
        x = self if dtype is None else self.to(dtype)
        return ops.LogSoftmax.apply(x, dims_to_axis(dim, x.ndim))

    def where(self, condition: Any, other: Any) -> Tensor:
        """``self`` where ``condition``, else ``other`` (torch's method form of where)."""
        return ops.Where.apply(ops.index_arg(condition), self, other)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], Sequence):
            shape = tuple(shape[0])
        return ops.Reshape.apply(self, shape)

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            wrap_dim(start_dim, 0), wrap_dim(end_dim, 0)
            return self.reshape(1)
        start, end = wrap_dim(start_dim, self.ndim), wrap_dim(end_dim, self.ndim)
        if start > end:
            raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
        merged = int(np.prod(self.shape[start : end + 1], dtype=np.int64))
        return self.reshape(*self.shape[:start], merged, *self.shape[end + 1 :])

    def squeeze(self, dim: Any = None) -> Tensor:
        """Drop size-1 dims (all, or those of ``dim``; a named dim of another size stays, as
        torch)."""
        if dim is None:
            drop = {i for i, s in enumerate(self.shape) if s == 1}
        else:
            dims = dim if isinstance(dim, Sequence) else (dim,)
            drop = {
                d
                for d in (wrap_dim(d, self.ndim) for d in dims)
                if self.ndim and self.shape[d] == 1
            }
        return self.reshape(*(s for i, s in enumerate(self.shape) if i not in drop))

    def unsqueeze(self, dim: int) -> Tensor:
        d = wrap_dim(dim, self.ndim + 1)  # one more place than dims: -ndim-1 .. ndim
        return self.reshape(*self.shape[:d], 1, *self.shape[d:])

    def permute(self, *dims: Any) -> Tensor:
        if len(dims) == 1 and isinstance(dims[0], Sequence):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise ValueError(f"permute: {dims} is not a permutation of the {self.ndim} dims")
        axes = tuple(wrap_dim(d, self.ndim) for d in dims)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute: {dims} is not a permutation of the {self.ndim} dims")
        return ops.Permute.apply(self, axes)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        if self.ndim == 0:  # torch allows transpose(0, 0) and (-1, -1) of a 0-d tensor
            wrap_dim(dim0, 0), wrap_dim(dim1, 0)
            return ops.Reshape.apply(self, ())
        perm = list(range(self.ndim))
        d0, d1 = dims_to_axis(dim0, self.ndim), dims_to_axis(dim1, self.ndim)
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return ops.Permute.apply(self, tuple(perm))

    @property
    def T(self) -> Tensor:
        return ops.Permute.apply(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"mT needs at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    def expand(self, *shape: Any) -> Tensor:
        """As torch: -1 keeps a dim's size; new dims go in front."""
        if len(shape) == 1 and isinstance(shape[0], Sequence):
            shape = tuple(shape[0])
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ValueError(f"expand: {tuple(shape)} has fewer dims than the tensor {self.shape}")
        if -1 in shape:
            if -1 in shape[:lead]:
                raise ValueError(f"expand: -1 is not allowed in a new leading dim: {shape}")
            shape = tuple(s if s != -1 else self.shape[i - lead] for i, s in enumerate(shape))
        return ops.BroadcastTo.apply(self, tuple(shape))

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """torch's three overloads: ``to(dtype, non_blocking=False, copy=False, *,
        memory_format)``, ``to(device=None, dtype=None, non_blocking=False, copy=False, *,
        memory_format)`` and ``to(other, non_blocking=False, copy=False)`` (other's dtype).
        A recorded cast (the gradient comes back in this tensor's dtype); ``self`` when the
        dtype already matches, unless ``copy``."""
        names = ["dtype", "non_blocking", "copy"]
        first = args[0] if args else kwargs.get("device", kwargs.get("other"))
        if isinstance(first, Tensor):
            args = (first.dtype, *args[1:])
            kwargs.pop("other", None)
        elif type(first).__name__ == "device" or (isinstance(first, str) and not _is_dtype(first)):
            names = ["device", "dtype", "non_blocking", "copy"]
        kwargs = bind_overload(
            "to", names, args, kwargs, {"device", "dtype", "non_blocking", "copy", "memory_format"}
        )
        check_torch_options(
            "to",
            device=kwargs.get("device"),
            non_blocking=kwargs.get("non_blocking", False),
            memory_format=kwargs.get("memory_format"),
        )
        dtype, copy = kwargs.get("dtype"), kwargs.get("copy", False)
        return self._cast(self.dtype if dtype is None else np.dtype(dtype), copy)

    def _cast(self, dtype: np.dtype, copy: bool) -> Tensor:
        if dtype == self.dtype and not copy:
            return self
        if dtype.kind != "f":  # as torch: an integer copy is not differentiable
            return Tensor._wrap(self.data.astype(dtype))
        return ops.Cast.apply(self, dtype)

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """NumPy copies where it must (a reshape of a transpose), so every tensor is usable as
        is; returned unchanged, as torch does for a contiguous tensor."""
        check_torch_options("contiguous", memory_format=memory_format)
        return self

    def t(self) -> Tensor:
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, got shape {self.shape}")
        return self.T

    def square(self) -> Tensor:
        return ops.Mul.apply(self, self)

    def clone(self, *, memory_format: Any = None) -> Tensor:
        check_torch_options("clone", memory_format=memory_format)
        return ops.Cast.apply(self, self.dtype)

    def float(self, memory_format: Any = None) -> Tensor:
        check_torch_options("float", memory_format=memory_format)
        return self._cast(np.dtype(np.float32), False)

    def double(self, memory_format: Any = None) -> Tensor:
        check_torch_options("double", memory_format=memory_format)
        return self._cast(np.dtype(np.float64), False)

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
        """For the in-place ops minigrad does not record (copy_, and fill_ of a tensor
        outside the graph): only outside the graph,
        and never on a traced tensor (the write would change one representative array)."""
        if is_tracer(self) or is_tracer(other):
            raise TracingError(
                "zero_/fill_/copy_ inside a transformation (vmap, grad, jit) are not recorded; "
                "use an out-of-place op (zeros_like, where, ...)"
            )
        if _mode.enabled and (
            self._requires_grad or (isinstance(other, Tensor) and other._requires_grad)
        ):
            raise RuntimeError(
                "minigrad does not record this in-place operation: a tensor that requires grad "
                "was modified in place with grad enabled; use an out-of-place op or no_grad()"
            )

    def _bump(self) -> Tensor:
        self._version_counter[0] += 1
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
        if is_tracer(other):  # a traced self is a Tracer, whose _inplace records the op
            raise TracingError(
                "in-place operation on a tensor that is not traced, with a traced operand, "
                "inside a transformation is not supported; use an out-of-place op"
            )
        o = other.data if isinstance(other, Tensor) else other
        if alpha != 1.0:
            o = alpha * o
        recording = _mode.enabled and (
            self._requires_grad or (isinstance(other, Tensor) and other._requires_grad)
        )
        if not recording:
            result = primitive.forward(RuleCtx(), self.data, o)
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
        return self._record_inplace(
            lambda old: primitive.apply(old, other if alpha == 1.0 else other * alpha)
        )

    def _record_inplace(self, make: Any) -> Tensor:
        """A recorded in-place op: ``make(old)`` computes the new value from a Tensor standing
        for the old one; this tensor takes its value, grad_fn and a new version."""
        if self.grad_fn is None and self._requires_grad:
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
        old._requires_grad, old._version_counter = self._requires_grad, self._version_counter
        result = make(old)
        if result.shape != self.shape:
            raise RuntimeError(
                f"output with shape {self.shape} doesn't match the broadcast shape {result.shape}"
            )
        self.data, self.grad_fn, self._requires_grad = result.data, result.grad_fn, True
        self._version_counter = [self._version_counter[0] + 1]
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
        return self.fill_(0)

    def fill_(self, value: Any) -> Tensor:
        if _mode.enabled and self._requires_grad and not is_tracer(self):
            # recorded, as torch: the new value does not depend on the old (gradient 0)
            everywhere = np.ones(self.shape, dtype=bool)
            return self._record_inplace(
                lambda old: PRIMITIVES["Where"].apply(everywhere, value, old)
            )
        self._check_inplace(value)
        self.data[...] = value.data if isinstance(value, Tensor) else value
        return self._bump()

    def copy_(self, src: Any) -> Tensor:
        self._check_inplace(src)
        self.data[...] = src.data if isinstance(src, Tensor) else src
        return self._bump()


def bind_overload(
    fn: str, names: list[str], args: tuple, kwargs: dict, allowed: set[str]
) -> dict[str, Any]:
    """The arguments of one chosen overload by name: ``args`` bound to ``names`` in order,
    then ``kwargs``; errors worded as Python's for a plain signature."""
    if len(args) > len(names):
        raise TypeError(f"{fn}() takes at most {len(names)} positional arguments")
    bound = dict(kwargs)
    for name, value in zip(names, args, strict=False):
        if name in bound:
            raise TypeError(f"{fn}() got multiple values for argument {name!r}")
        bound[name] = value
    unknown = set(bound) - allowed
    if unknown:
        raise TypeError(f"{fn}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    return bound


def _is_dtype(name: str) -> bool:
    """A dtype's name ("float64", minigrad.float64) rather than a device's ("cpu")."""
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


def _variance_args(name: str, args: tuple, kwargs: dict) -> tuple[Any, float, bool]:
    """(dim, correction, keepdim) from torch's var/std argument forms."""
    names = ["unbiased"] if args and isinstance(args[0], bool) else ["dim", "unbiased", "keepdim"]
    kwargs = bind_overload(name, names, args, kwargs, {"dim", "unbiased", "correction", "keepdim"})
    unbiased, correction = kwargs.get("unbiased"), kwargs.get("correction")
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}(): give unbiased or correction, not both")
    if correction is None:
        correction = 0 if unbiased is False else 1
    return kwargs.get("dim"), correction, bool(kwargs.get("keepdim", False))


def wrap_dim(dim: int, ndim: int) -> int:
    """torch's maybe_wrap_dim: -ndim <= dim < ndim (a 0-d tensor accepts 0 and -1)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def dims_to_axis(dim: Any, ndim: int) -> Any:
    """Normalise an int / sequence / None dim argument for NumPy's ``axis``. On a 0-d tensor
    dim 0 / -1 is accepted (as torch) and means the whole (one-element) tensor: None."""
    if dim is None:
        return None
    if isinstance(dim, Sequence):
        axes = tuple(wrap_dim(d, ndim) for d in dim)
        return axes if ndim and axes else None  # dim=() reduces over all dims (torch 2.x)
    axis = wrap_dim(dim, ndim)
    return axis if ndim else None


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Build a Tensor (copying like torch.tensor). Lists/scalars default to float32."""
    arr = np.array(_as_array(data, dtype), copy=True)
    return Tensor(arr, requires_grad=requires_grad)
