"""PJRT: compile a StableHLO module with XLA and run it on NumPy arrays, through jaxlib's CPU
client (the runtime JAX itself runs on; ``jaxlib`` is imported only here, on the first compile).

What one call costs beyond XLA's own work, and why it stays small:

- Inputs: an array that this module returned (an earlier output) already is a view of a PJRT
  buffer: that buffer is passed back as it is, with no conversion at all. That is the common
  case of a training loop, whose parameters go from one step's outputs to the next step's
  inputs. A large array becomes a PJRT buffer through DLPack, a *view* of its memory when it
  is 64-byte aligned (as NumPy's page-aligned large allocations are; XLA copies otherwise). A
  small one is copied into a staging array that the executable keeps per input, aligned, with
  its PJRT buffer made once: a memcpy of a few KiB costs less than making a buffer.
- Launch: the client is *synchronous*: the executable runs on the calling thread, which needs
  the results at once anyway (minigrad is eager NumPy), instead of being handed to a worker
  thread and waited for; a result handler per output wraps XLA's buffers as it returns.
- Outputs: each result is a writable NumPy view of the PJRT buffer XLA wrote (no copy); the
  view keeps the buffer alive, so minigrad's in-place ops on it work as on any array.
"""

from __future__ import annotations

import ctypes
import threading
import time
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
        self.wait = xla_client.batched_block_until_ready
        # jaxlib's array type takes its abstract value (shape, dtype) from jax's ShapedArray;
        # its DLPack import loads jax anyway. The handlers skip their per-call checks: one
        # device, and the module fixes every result's type.
        from jax.core import ShapedArray

        sharding = xla_client.SingleDeviceSharding(self.device)
        self.result_handler = lambda shape, dtype: _jax.array_result_handler(
            ShapedArray(shape, dtype), sharding, True, True
        )


_RUNTIME: list[Runtime] = []
ALIGN = 64  # the alignment XLA's CPU runtime needs to use a host array in place
STAGE_BYTES = 64 * 1024  # inputs up to this size are copied into a staging array


def runtime() -> Runtime:
    """The process's Runtime, made on first use."""
    if not _RUNTIME:
        _RUNTIME.append(Runtime())
    return _RUNTIME[0]


class DeviceView:
    """The marker base of the owners of output views. An owner (``view_type``) is a ctypes
    byte array laid over one PJRT output buffer's memory: NumPy makes the view from it through
    the buffer protocol (with the dtype and shape given, nothing to parse), and its
    ``buffer`` attribute keeps the PJRT buffer alive and is what ``output_buffer`` hands back
    to XLA when the view is passed in again."""

    __slots__ = ()


_VIEW_TYPES: dict[int, type] = {}


def view_type(nbytes: int) -> type:
    """The owner type of an output view of ``nbytes`` bytes (one type per size, made once)."""
    kind = _VIEW_TYPES.get(nbytes)
    if kind is None:
        kind = type(f"DeviceView{nbytes}", (ctypes.c_char * nbytes, DeviceView), {})
        _VIEW_TYPES[nbytes] = kind
    return kind


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ALIGN-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes].view(dtype)[: int(np.prod(shape))].reshape(shape)


def output_buffer(arr: np.ndarray) -> Any:
    """The PJRT buffer ``arr`` is the whole view of (an output), or None.

    Only ``Executable.outputs`` makes an array whose ``.base`` is a DeviceView: NumPy gives
    every view *of* that array (a slice, a transpose, a reshape) the array itself as its
    base, because it stops collapsing a base chain at an owner that is not an ndarray."""
    owner = arr.base
    return owner.buffer if isinstance(owner, DeviceView) else None


def to_buffer(arr: np.ndarray, rt: Runtime) -> Any:
    """A new PJRT buffer holding ``arr``: a DLPack view of its memory (XLA copies when it is
    not 64-byte aligned; a read-only or non-C-contiguous array is copied first)."""
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
        # what each output's view needs, worked out once: shape, owner type (None for an
        # empty output, which gets a fresh empty array) and dtype
        self.out_views = [
            (s, None if 0 in s else view_type(int(np.prod(s)) * d.itemsize), d)
            for s, d in self.out_types
        ]
        # one result handler per output wraps XLA's buffer in an array at once (cheaper than
        # disassembling the results and wrapping each afterwards)
        self.handlers = [rt.result_handler(s, d) for s, d in self.out_types]
        self.staging: dict[int, tuple[np.ndarray, Any]] = {}  # input index -> (array, buffer)
        self.lock = threading.Lock()  # the staging arrays are shared by every call

    def staging_slot(self, i: int, arr: np.ndarray) -> tuple[np.ndarray, Any]:
        """Input ``i``'s staging array (aligned, shaped and typed as ``arr``) and its PJRT
        buffer, a view of it: made on the first call, kept for the later ones."""
        slot = self.staging.get(i)
        if slot is None:
            staged = aligned_empty(arr.shape, arr.dtype)
            slot = self.staging[i] = (staged, to_buffer(staged, self.rt))
        return slot

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        with self.lock:
            results = self.launch(self.buffers_for(arrays))
        return self.outputs(results)

    def buffers_for(self, arrays: list[np.ndarray]) -> list[Any]:
        """The input buffers: an output view's own buffer, a staged copy of a small array, a
        DLPack view of a large one."""
        buffers = []
        staging = self.staging
        for i, a in enumerate(arrays):
            owner = a.base
            if isinstance(owner, DeviceView):  # output_buffer(a), inline: the common case
                buffers.append(owner.buffer)
            elif a.nbytes <= STAGE_BYTES:
                staged, buffer = staging.get(i) or self.staging_slot(i, a)
                staged[...] = a  # the copy XLA reads through ``buffer``
                buffers.append(buffer)
            else:
                buffers.append(to_buffer(a, self.rt))
        return buffers

    def launch(self, buffers: list[Any]) -> list[Any]:
        """Run the executable (on this thread) and wrap each result buffer in an array, ready.

        The wait releases the GIL: PJRT may finish the call on a worker thread, where
        releasing a DLPack input runs NumPy's deleter, which takes the GIL. Reading a result's
        address while holding the GIL instead could wait on that thread forever."""
        results = self.loaded.execute_sharded(buffers).consume_with_handlers(self.handlers)
        self.rt.wait(results)
        return results

    def outputs(self, results: list[Any]) -> list[np.ndarray]:
        """Writable NumPy views of the result buffers (no copy), each through its owner (a
        DeviceView over the buffer's memory); an empty output (whose pointer need not be an
        address) is a fresh empty array."""
        views = []
        for r, (shape, owner_type, dtype) in zip(results, self.out_views, strict=True):
            if owner_type is None:
                views.append(np.empty(shape, dtype))
                continue
            owner = owner_type.from_address(r.unsafe_buffer_pointer())
            owner.buffer = r
            views.append(np.ndarray(shape, dtype, owner))
        return views

    def optimized_hlo(self) -> str:
        """XLA's optimized HLO of this executable (fusions, layouts), as text."""
        return "\n".join(m.to_string() for m in self.loaded.hlo_modules())
