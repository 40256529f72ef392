"""``minigrad.nn``: Module, Parameter, Linear, ReLU, Sequential (torch.nn's shapes and names)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from minigrad.nn import functional
from minigrad.tensor import Tensor

__all__ = ["Linear", "Module", "Parameter", "ReLU", "Sequential", "functional"]


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

    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)

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
            p._vc[0] += 1


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
        rng = rng if rng is not None else np.random.default_rng()
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
