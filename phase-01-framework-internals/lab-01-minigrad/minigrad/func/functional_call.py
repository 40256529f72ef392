"""``functional_call``: run an ``nn.Module`` with the parameters given, as torch.func does.

A transformation differentiates a function of its arguments; a model's loss depends on the
module's parameters, which live on the module. ``functional_call(model, params, args)`` calls
``model(*args)`` with each named parameter replaced by the tensor given under its name (a
tracer, when it runs inside grad / vmap / jit), and puts the module's own parameters back
afterwards, so ``grad(lambda p: loss(functional_call(model, p, (x,))))(params)`` is the
gradient of the loss in every parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from minigrad.nn.modules import Module


def functional_call(
    module: Module,
    parameter_and_buffer_dicts: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    args: Any = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """torch.func.functional_call: ``module(*args, **kwargs)`` with the given tensors in place
    of the parameters of those names (dotted, as ``named_parameters`` gives them). ``args``
    may be one value (not a tuple) for a single argument. With ``tie_weights`` a parameter
    the module uses under several names takes the given value under all of them; with
    ``strict`` every parameter must be given."""
    dicts = (
        [parameter_and_buffer_dicts]
        if isinstance(parameter_and_buffer_dicts, Mapping)
        else list(parameter_and_buffer_dicts)
    )
    given: dict[str, Any] = {}
    for d in dicts:
        for name, value in d.items():
            if name in given:
                raise ValueError(f"functional_call: {name!r} appears in more than one dict")
            given[name] = value
    named = list(module.named_parameters(remove_duplicate=False))
    known = {name for name, _ in named}
    unexpected = sorted(set(given) - known)
    if unexpected:
        raise ValueError(f"functional_call: the module has no parameter named {unexpected[0]!r}")
    if strict:
        missing = sorted(known - set(given))
        if missing:
            raise ValueError(f"functional_call: strict, and no value for {missing[0]!r}")
    if tie_weights:  # every name of a shared parameter takes the value given for one of them
        by_param = {id(p): given[name] for name, p in named if name in given}
        given = {name: by_param[id(p)] for name, p in named if id(p) in by_param}
    swapped = []
    try:
        for name, value in given.items():
            owner, attr = _owner(module, name)
            swapped.append((owner, attr, owner.__dict__[attr]))
            object.__setattr__(owner, attr, value)  # the registry (_parameters) is untouched
        if args is None:
            args = ()
        elif not isinstance(args, tuple):
            args = (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for owner, attr, original in reversed(swapped):
            object.__setattr__(owner, attr, original)


def _owner(module: Module, dotted: str) -> tuple[Module, str]:
    *path, attr = dotted.split(".")
    for part in path:
        module = module._modules[part]
    return module, attr
