"""warp_softmax: softmax written as a PyTorch custom operator in C++ (and CUDA).

The compiled library ``warp_softmax.so`` (next to this file, built by the editable install
``pip install --no-deps --no-build-isolation -e <lab folder>``, which ``make setup`` runs)
registers everything itself: the schemas ``warp_softmax::softmax``, ``log_softmax`` and
their backward ops, and their CPU, Meta, Autograd and Autocast kernels (CUDA too where built).
This package loads that file, once, adds friendly names, and registers only what the library
cannot hold: vmap batching rules (:mod:`warp_softmax.batching`).
``torch.ops.load_library`` on the same path before or after importing it is harmless.

    >>> import torch, warp_softmax
    >>> warp_softmax.softmax(torch.randn(2, 8), dim=-1).sum(-1)
    tensor([1.0000, 1.0000])
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = [
    "LIBRARY_PATH",
    "softmax",
    "log_softmax",
    "softmax_backward",
    "log_softmax_backward",
    "cpu_capability",
    "cpu_capabilities",
]

LIBRARY_PATH: Path = Path(__file__).resolve().parent / "warp_softmax.so"


def _load_library() -> None:
    if not LIBRARY_PATH.is_file():
        raise ImportError(
            f"warp_softmax: the compiled library {LIBRARY_PATH} is missing. Build it with\n"
            f"  pip install --no-deps --no-build-isolation -e {LIBRARY_PATH.parent.parent}\n"
            "(or `make setup` at the repository root)."
        )
    # load_library dlopens the file; dlopen of an already-loaded file returns the same handle,
    # so the C++ static registrations run exactly once per process.
    if str(LIBRARY_PATH) not in torch.ops.loaded_libraries:
        torch.ops.load_library(str(LIBRARY_PATH))


_load_library()

from warp_softmax import batching as _batching  # noqa: E402

_batching.register()


def softmax(x: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``; the same values, dtype and layout as
    ``F.softmax(x, dim, dtype=dtype)``.

    Takes float32, float64, bfloat16 and float16 (reduced types accumulate in float32), and
    float8_e4m3fn / float8_e5m2 (read and widened in registers), any ``dim`` (negative too),
    non-contiguous inputs, empty and 0-dim tensors. ``dtype`` converts in the kernel: the
    input is read as it is and widened on the way, the result is stored in ``dtype``;
    ``dtype=torch.float8_e4m3fn`` gives ``F.softmax(x.float(), dim).to(torch.float8_e4m3fn)``.
    Differentiable twice, traceable by torch.compile, vmap-able.
    """
    return torch.ops.warp_softmax.softmax(x, dim, dtype)


def log_softmax(x: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``F.log_softmax(x, dim, dtype=dtype)`` on the same kernels as :func:`softmax`: the same
    dtypes, FP8 included, and the same dispatch keys."""
    return torch.ops.warp_softmax.log_softmax(x, dim, dtype)


def softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int) -> torch.Tensor:
    """The gradient of softmax with respect to its input: ``y * (g - sum(g * y, dim))``."""
    return torch.ops.warp_softmax.softmax_backward(grad_output, output, dim)


def log_softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int) -> torch.Tensor:
    """The gradient of log_softmax with respect to its input: ``g - exp(y) * sum(g, dim)``."""
    return torch.ops.warp_softmax.log_softmax_backward(grad_output, output, dim)


def cpu_capability() -> str:
    """The SIMD variant of the CPU kernel in use: ``"avx512"``, ``"avx2"`` or ``"default"``.

    The library picks the widest variant the CPU supports; the environment variable
    ``WARP_SOFTMAX_CPU_CAPABILITY`` (read once per process) asks for a narrower one.
    """
    return torch.ops.warp_softmax.cpu_capability()


def cpu_capabilities() -> list[str]:
    """Every CPU variant this build has and this CPU can run, widest first."""
    return list(torch.ops.warp_softmax.cpu_capabilities())


def threads_used(rows: int, row_length: int) -> int:
    """How many threads the CPU kernel's ``at::parallel_for`` uses for ``rows`` rows of
    ``row_length`` elements (1 means the library was built without OpenMP or the tensor is
    too small to be worth splitting)."""
    return int(torch.ops.warp_softmax._threads_used(rows, row_length))
