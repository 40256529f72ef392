"""Module, Parameter and the layers, under torch.nn's names, shapes, init and printing."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from minigrad.creation import default_generator
from minigrad.nn import functional
from minigrad.tensor import Tensor


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


class Parameter(Tensor):
    """A leaf Tensor that a Module registers (requires grad by default)."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data.data if isinstance(data, Tensor) else data)
        self.requires_grad = requires_grad


class Module:
    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"call Module.__init__() before assigning {name!r}")
        params, modules = self._parameters, self._modules
        if isinstance(value, Parameter):
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            modules[name] = value
        elif name in params or name in modules:
            if value is not None and name in params and isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign a plain Tensor as parameter {name!r} "
                    "(Parameter or None expected)"
                )
            # as torch: ``lin.bias = None`` (or any other value) unregisters the old one
            params.pop(name, None)
            modules.pop(name, None)
        object.__setattr__(self, name, value)

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        """The part inside the parentheses of this module's line in ``repr``."""
        return ""

    def __repr__(self) -> str:
        # torch's layout: one line per child, "(name): ...", nested children indented
        lines = [f"({name}): " + _indent(repr(m)) for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = "\n  ".join(([extra] if extra else []) + lines)
        return f"{type(self).__name__}(\n  {body}\n)"

    def named_parameters(
        self, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """Each parameter once, under its first name (a module or a Parameter used twice
        must not be updated twice by an optimizer), as torch does."""
        seen: set[int] = set()
        for name, p in self._all_named_parameters(prefix):
            if remove_duplicate:
                if id(p) in seen:
                    continue
                seen.add(id(p))
            yield name, p

    def _all_named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for name, p in self._parameters.items():
            yield prefix + name, p
        for mname, m in self._modules.items():
            yield from m._all_named_parameters(prefix + mname + ".")

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def train(self, mode: bool = True) -> Module:
        object.__setattr__(self, "training", mode)
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def modules(self) -> Iterator[Module]:
        yield self
        for m in self._modules.values():
            yield from m.modules()

    def to(self, dtype: Any) -> Module:
        """Cast every parameter in place (same Parameter objects, new data), as torch."""
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p._version_counter[0] += 1
        return self

    def double(self) -> Module:
        return self.to(np.float64)

    def float(self) -> Module:
        return self.to(np.float32)

    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        # Every name, shared parameters included (torch's state_dict keeps both keys too).
        return OrderedDict(
            (n, p.data.copy()) for n, p in self.named_parameters(remove_duplicate=False)
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        own = dict(self.named_parameters(remove_duplicate=False))
        missing, unexpected = own.keys() - state.keys(), state.keys() - own.keys()
        if missing or unexpected:
            raise KeyError(
                f"load_state_dict: missing keys {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        for name, p in own.items():
            value = np.asarray(state[name].data if isinstance(state[name], Tensor) else state[name])
            if value.shape != p.shape:
                raise ValueError(
                    f"load_state_dict: {name} has shape {p.shape}, checkpoint has {value.shape}"
                )
            p.data[...] = value
            p._version_counter[0] += 1


class Linear(Module):
    """y = x @ weight.T + bias, weight (out, in), torch's default U(-1/√in, 1/√in) init."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype: Any = np.float32,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        rng = rng if rng is not None else default_generator()
        # torch's bound; with no inputs (in_features == 0) there is nothing to scale, and
        # torch initialises to 0 rather than dividing by zero
        bound = 1.0 / np.sqrt(in_features) if in_features > 0 else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(
            rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype)
        )
        self.bias = (
            Parameter(rng.uniform(-bound, bound, out_features).astype(dtype)) if bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        return functional.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return functional.relu(x)


class Sequential(Module):
    def __init__(self, *layers: Module) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]


class ModuleList(Module):
    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def append(self, module: Module) -> ModuleList:
        setattr(self, str(len(self._modules)), module)
        return self

    def __repr__(self) -> str:
        # as torch's ModuleList: a run of identical children prints once, "(0-1): 2 x Block(...)"
        groups: list[list[Any]] = []  # [first index, last index, repr]
        for i, m in enumerate(self._modules.values()):
            text = repr(m)
            if groups and groups[-1][2] == text:
                groups[-1][1] = i
            else:
                groups.append([i, i, text])
        if not groups:
            return "ModuleList()"
        lines = [
            f"({a}): {_indent(text)}" if a == b else f"({a}-{b}): {b - a + 1} x {_indent(text)}"
            for a, b, text in groups
        ]
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class Embedding(Module):
    """A table of ``num_embeddings`` rows of size ``embedding_dim``, N(0, 1) init (torch's);
    the ``padding_idx`` row starts at zero and gets no gradient."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        dtype: Any = np.float32,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        rng = rng if rng is not None else default_generator()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx {padding_idx} is outside the {num_embeddings} rows")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        table = rng.standard_normal((num_embeddings, embedding_dim)).astype(dtype)
        if padding_idx is not None:
            table[padding_idx] = 0
        self.weight = Parameter(table)

    def forward(self, indices: Any) -> Tensor:
        return functional.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class LayerNorm(Module):
    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        self.weight = Parameter(np.ones(shape, dtype)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(shape, dtype)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return functional.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate='{self.approximate}'"


class Dropout(Module):
    """Active in training mode only (``model.eval()`` makes it the identity), as torch."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return functional.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"
