"""PJRT: compile a StableHLO module with XLA and run it on NumPy arrays, through jaxlib's CPU
client (the runtime JAX itself runs on; ``jaxlib`` is imported only here, on the first compile).

What one call costs beyond XLA's own work, and why it stays small:

- Inputs: a NumPy array becomes a PJRT buffer through DLPack, a *view* of the array's memory
  when it is 64-byte aligned (a copy otherwise, which XLA's CPU kernels need). An array that
  this module returned (an earlier output) already is a view of a PJRT buffer: that buffer is
  passed back as it is, with no conversion at all. That is the common case of a training loop,
  whose parameters go from one step's outputs to the next step's inputs.
- Launch: the client is *synchronous*: the executable runs on the calling thread, which needs
  the results at once anyway (minigrad is eager NumPy), instead of being handed to a worker
  thread and waited for.
- Outputs: each result is a writable NumPy view of the PJRT buffer XLA wrote (no copy); the
  view keeps the buffer alive, so minigrad's in-place ops on it work as on any array.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np


class Runtime:
    """jaxlib's pieces this module uses, loaded on the first compile: the one CPU client of
    the process, its device, and DLPack import (``jaxlib._jax``, the extension JAX calls)."""

    def __init__(self) -> None:
        try:
            from jaxlib import _jax, xla_client
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "minigrad.func.jit runs on XLA through jaxlib's PJRT client: pip install "
                "jaxlib (the `jit` extra of minigrad)"
            ) from e
        self.xla_client = xla_client
        self.client = xla_client.make_cpu_client(asynchronous=False)
        self.device = self.client.local_devices()[0]
        self.from_dlpack = _jax.dlpack_managed_tensor_to_buffer


_RUNTIME: list[Runtime] = []


def runtime() -> Runtime:
    if not _RUNTIME:
        _RUNTIME.append(Runtime())
    return _RUNTIME[0]


class DeviceView:
    """The owner of a NumPy view of one PJRT output buffer (the view's ``.base``): NumPy reads
    its ``__array_interface__``; ``buffer`` keeps the memory alive and is what ``to_buffer``
    hands back to XLA when this exact view is passed in again."""

    __slots__ = ("__array_interface__", "buffer", "view", "__weakref__")

    def __init__(self, buffer: Any, shape: tuple[int, ...], typestr: str) -> None:
        self.buffer = buffer
        self.__array_interface__ = {
            "data": (buffer.unsafe_buffer_pointer(), False),
            "shape": shape,
            "typestr": typestr,
            "version": 3,
        }
        self.view: Any = None


def to_numpy(buffer: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A writable NumPy view of a PJRT CPU buffer (no copy)."""
    if 0 in shape:  # an empty buffer's pointer need not be an address
        return np.empty(shape, dtype)
    owner = DeviceView(buffer, shape, dtype.str)
    arr = np.asarray(owner)
    owner.view = weakref.ref(arr)
    return arr


def to_buffer(arr: np.ndarray, rt: Runtime) -> Any:
    """A PJRT buffer holding ``arr``: the buffer itself if ``arr`` is an output view made by
    ``to_numpy``; otherwise a DLPack view of its memory (a copy when unaligned, read-only or
    not C-contiguous)."""
    owner = arr.base
    if type(owner) is DeviceView and owner.view() is arr:
        return owner.buffer
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        arr = np.array(arr, order="C")  # DLPack's legacy capsule exports writable arrays only
    return rt.from_dlpack(arr.__dlpack__(), rt.device, None, None)


class Executable:
    """One compiled StableHLO module on the CPU device; ``__call__`` maps NumPy arrays to
    NumPy arrays. ``compile_seconds`` is XLA's compile time (parse, optimize, codegen)."""

    def __init__(self, text: str, out_types: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        self.rt = rt = runtime()
        start = time.perf_counter()
        self.loaded = rt.client.compile_and_load(
            text, rt.xla_client.DeviceList((rt.device,)), rt.xla_client.CompileOptions()
        )
        self.compile_seconds = time.perf_counter() - start
        self.out_types = [(tuple(s), np.dtype(d)) for s, d in out_types]

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        rt = self.rt
        buffers = [to_buffer(a, rt) for a in arrays]
        results = self.loaded.execute_sharded(buffers).disassemble_into_single_device_arrays()
        return [
            to_numpy(r[0], shape, dtype)
            for r, (shape, dtype) in zip(results, self.out_types, strict=True)
        ]

    def optimized_hlo(self) -> str:
        """XLA's optimized HLO of this executable (fusions, layouts), as text."""
        return "\n".join(m.to_string() for m in self.loaded.hlo_modules())
