"""Inputs shared by the tests, the demo and `check`: tensors in every memory layout, and the
argument lists opcheck runs each op on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

# Row lengths around the kernels' boundaries, short to vocabulary-sized.
ROW_LENGTHS = [1, 7, 1024, 4096, 32768]


def make_input(
    shape: tuple[int, ...],
    layout: str,
    device: str,
    dtype: torch.dtype = torch.float32,
    scale: float = 1.0,
    seed: int = 0,
) -> torch.Tensor:
    """A tensor of `shape` stored as `layout`: contiguous, transposed (a .mT view of the
    transposed storage) or strided (every other element along the last dimension)."""
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        x = torch.randn(shape, generator=g)
    elif layout == "transposed":
        x = torch.randn((*shape[:-2], shape[-1], shape[-2]), generator=g).mT
    elif layout == "strided":
        x = torch.randn((*shape[:-1], 2 * shape[-1]), generator=g)[..., ::2]
    else:
        raise ValueError(f"layout must be contiguous, transposed or strided, got {layout!r}")
    return (x * scale).to(device=device, dtype=dtype)


def opcheck_cases(device: str) -> list[tuple[torch.Tensor, int]]:
    """(input, dim) pairs for torch.library.opcheck: layouts, dtypes, 0-dim, with and without
    requires_grad (the non-autograd path too)."""

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.detach().requires_grad_()

    return [
        (torch.randn(4, 8, device=device, requires_grad=True), -1),
        (leaf(make_input((3, 5, 6), "transposed", device)), 1),
        (leaf(make_input((2, 1030), "strided", device)), -1),
        (torch.randn(5, 3, device=device, dtype=torch.bfloat16, requires_grad=True), 0),
        (torch.randn((), device=device, requires_grad=True), 0),
        (torch.randn(4, 8, device=device), -1),
    ]


NO_GPU_REASON = "needs a CUDA GPU (torch sees none on this machine)"


def devices() -> list:
    """``"cpu"`` and ``"cuda"`` for device-parametrized tests: the CUDA cases exist on every
    machine and skip, naming the hardware, where torch sees no GPU."""
    import pytest  # only the tests call this

    no_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU_REASON)
    return ["cpu", pytest.param("cuda", marks=no_gpu)]


def run_in_fresh_python(
    code: str, env_extra: dict[str, str] | None = None, cwd: Path | None = None
) -> dict:
    """Run `code` in a fresh interpreter of this Python; it must print one JSON line last.
    Raises AssertionError with the child's stderr when it fails."""
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
