"""Memory: what a training step keeps alive, checkpointing, tensor lifetimes, CUDA's allocator.

- :func:`measure_minigrad_step` — a deep minigrad MLP's training step under ``tracemalloc``
  (NumPy reports its data buffers to it): the memory the graph holds after forward (the saved
  activations) and the step's peak, with and without ``minigrad.utils.checkpoint``.
- :func:`tensor_lifetimes` / :func:`storage_sharing` — on the CPU: when a torch tensor dies
  (weak references; autograd's saved tensors keep it alive until backward frees them), and
  which operations return views of the same storage and which copy.
- :func:`cuda_allocator_tour` — PyTorch's CUDA caching allocator (needs a CUDA GPU).
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import minigrad
import minigrad.nn as mnn
import minigrad.nn.functional as MF
import numpy as np
import torch
from minigrad.utils import checkpoint
from phase01_common.timing import time_interleaved

MiB = 1 << 20


# ----------------------------------------------------------------------------- minigrad
@dataclass
class DeepMLP:
    """``depth`` blocks of Linear(width, width) → ReLU, then Linear(width, 10), in minigrad."""

    blocks: list[mnn.Module]
    head: mnn.Module

    @classmethod
    def build(cls, depth: int, width: int) -> DeepMLP:
        blocks = [mnn.Sequential(mnn.Linear(width, width), mnn.ReLU()) for _ in range(depth)]
        return cls(blocks, mnn.Linear(width, 10))

    def parameters(self) -> list[minigrad.Tensor]:
        return [p for m in (*self.blocks, self.head) for p in m.parameters()]

    def copy_from(self, other: DeepMLP) -> None:
        for mine, theirs in zip(
            (*self.blocks, self.head), (*other.blocks, other.head), strict=True
        ):
            mine.load_state_dict(theirs.state_dict())

    def loss(self, x: minigrad.Tensor, y: np.ndarray, segment: int = 0) -> minigrad.Tensor:
        """Cross-entropy; with ``segment`` > 0 every ``segment`` blocks are one checkpoint."""
        h = x
        if segment <= 0:
            for block in self.blocks:
                h = block(h)
        else:
            for start in range(0, len(self.blocks), segment):
                h = checkpoint(mnn.Sequential(*self.blocks[start : start + segment]), h)
        return MF.cross_entropy(self.head(h), y)


@dataclass
class StepMemory:
    segment: int  # 0: no checkpointing
    graph_bytes: int  # traced memory held after forward, before backward (saved activations)
    peak_bytes: int  # traced peak over forward + backward, above the starting point
    step_seconds: float  # median over interleaved repeats, tracemalloc off
    grads: list[np.ndarray]


def _one_step(model: DeepMLP, x: minigrad.Tensor, y: np.ndarray, segment: int) -> None:
    for p in model.parameters():
        p.grad = None
    model.loss(x, y, segment).backward()


def measure_minigrad_step(
    model: DeepMLP, x: minigrad.Tensor, y: np.ndarray, segment: int = 0
) -> StepMemory:
    """One training step (forward, loss, backward) measured with tracemalloc (the timing is
    :func:`compare_checkpointing`'s, with tracemalloc off)."""
    for p in model.parameters():
        p.grad = None
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        loss = model.loss(x, y, segment)
        graph_bytes = tracemalloc.get_traced_memory()[0] - start
        loss.backward()
        del loss
        peak_bytes = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    grads = [np.array(p.grad.numpy(), copy=True) for p in model.parameters()]
    return StepMemory(segment, graph_bytes, peak_bytes, float("nan"), grads)


@dataclass
class CheckpointComparison:
    plain: StepMemory
    checkpointed: StepMemory
    activation_bytes: int  # one (batch, width) activation

    @property
    def bit_identical(self) -> bool:
        return all(
            a.dtype == b.dtype and a.tobytes() == b.tobytes()
            for a, b in zip(self.plain.grads, self.checkpointed.grads, strict=True)
        )

    @property
    def recompute_ratio(self) -> float:
        return self.checkpointed.step_seconds / self.plain.step_seconds


def compare_checkpointing(
    depth: int = 8, width: int = 128, batch: int = 256, segment: int = 4, repeats: int = 3
) -> CheckpointComparison:
    """The same model and batch, one step plain and one checkpointed every ``segment`` blocks;
    timings interleaved (plain, checkpointed, ...) so machine load hits both alike."""
    rng = np.random.default_rng(0)
    plain = DeepMLP.build(depth, width)
    twin = DeepMLP.build(depth, width)
    twin.copy_from(plain)
    x = minigrad.tensor(rng.standard_normal((batch, width)).astype(np.float32))
    y = rng.integers(0, 10, batch)
    a = measure_minigrad_step(plain, x, y, 0)
    b = measure_minigrad_step(twin, x, y, segment)
    timings = time_interleaved(
        {
            "plain": lambda: _one_step(plain, x, y, 0),
            "checkpointed": lambda: _one_step(twin, x, y, segment),
        },
        rounds=repeats,
        warmup=0,  # measure_minigrad_step above ran one step of each
    )
    a.step_seconds = timings.median("plain")
    b.step_seconds = timings.median("checkpointed")
    return CheckpointComparison(a, b, batch * width * 4)


# ----------------------------------------------------------------------------- CPU lifetimes
@dataclass
class Lifetimes:
    dies_on_del: bool  # a plain tensor's last reference gone: freed at once
    kept_by_graph: bool  # deleted by the user but saved for backward: still alive
    freed_by_backward: bool  # ... until backward releases the saved tensors
    view_keeps_base: bool  # a view keeps its base (and the storage) alive


def tensor_lifetimes() -> Lifetimes:
    """Weak references show when a tensor's memory can be reused (refcounting: immediately)."""
    plain = torch.randn(1000)
    ref = weakref.ref(plain)
    del plain
    dies_on_del = ref() is None

    x = torch.randn(1000, requires_grad=True)
    hidden = x * 2
    out = hidden.sin().sum()  # sin saves its input: hidden
    ref = weakref.ref(hidden)
    del hidden
    kept_by_graph = ref() is not None
    out.backward()
    del out
    freed_by_backward = ref() is None

    base = torch.randn(1000)
    view = base[10:20]
    ref = weakref.ref(base)
    del base
    view_keeps_base = ref() is not None and view._base is ref()
    return Lifetimes(dies_on_del, kept_by_graph, freed_by_backward, view_keeps_base)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def storage_sharing() -> list[tuple[str, bool, bool]]:
    """(operation, shares storage with the input, output is contiguous) for common ops."""
    x = torch.arange(24.0).reshape(4, 6)
    cases: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "x.view(6, 4)": lambda t: t.view(6, 4),
        "x.t()": lambda t: t.t(),
        "x[:, ::2]": lambda t: t[:, ::2],
        "x[1]": lambda t: t[1],
        "x.expand(2, 4, 6)": lambda t: t.expand(2, 4, 6),
        "x.t().reshape(24)": lambda t: t.t().reshape(24),
        "x.t().contiguous()": lambda t: t.t().contiguous(),
        "x[[0, 2]]": lambda t: t[[0, 2]],
        "x.clone()": lambda t: t.clone(),
        "x + 0": lambda t: t + 0,
    }
    return [(name, _shares(fn(x), x), fn(x).is_contiguous()) for name, fn in cases.items()]


# ----------------------------------------------------------------------------- CUDA
NEEDS_CUDA = "needs a CUDA GPU"


def cuda_allocator_tour(device: str = "cuda") -> dict[str, float]:
    """The caching allocator's bookkeeping, in MiB above the starting point.

    Requests over 10 MiB get a segment of their own (rounded to 2 MiB), so 8 blocks of
    12 MiB are 8 segments. Freeing every other one leaves 48 MiB *reserved* but free (cached,
    not returned to the driver); a 24 MiB request fits none of those 12 MiB holes and costs a
    new segment: reserved grows while 48 MiB sit idle — fragmentation. ``empty_cache``
    returns the unused segments."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"cuda_allocator_tour {NEEDS_CUDA}")
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_stats(device)

    def stats(label: str) -> dict[str, float]:
        s = torch.cuda.memory_stats(device)
        return {
            f"{label}: {name}": (s[f"{key}.all.current"] - base.get(f"{key}.all.current", 0)) / MiB
            for name, key in (("allocated", "allocated_bytes"), ("reserved", "reserved_bytes"))
        }

    out: dict[str, float] = {}
    blocks = [torch.empty(12 * MiB, dtype=torch.uint8, device=device) for _ in range(8)]
    out |= stats("8 x 12 MiB")
    del blocks[::2]
    out |= stats("every other freed")
    big = torch.empty(24 * MiB, dtype=torch.uint8, device=device)
    out |= stats("plus 24 MiB")
    del big, blocks
    out |= stats("all freed")
    torch.cuda.empty_cache()
    out |= stats("after empty_cache")
    out["segments cudaMalloc'd"] = float(
        torch.cuda.memory_stats(device)["segment.all.allocated"]
        - base.get("segment.all.allocated", 0)
    )
    return out
