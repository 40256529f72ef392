"""OpenVINO on the CPU: one compiled-model factory (threads, streams, precision), the same
model compiled per padded input shape (static shapes), and the CPU's BF16 capability.

OpenVINO reads our ``.onnx`` files directly (its ONNX front end), so an OpenVINO variant is
the same file as an ONNX Runtime one plus the settings it is compiled with. The settings that
matter here:

- ``INFERENCE_NUM_THREADS`` / ``NUM_STREAMS``: the counterpart of ONNX Runtime's intra-op
  threads and its one inter-op thread (one stream = one request at a time, ``threads``
  cores for it). These and the other threading knobs (pinning, latency mode, core type,
  hyper-threading) are declared once, :func:`threading_settings`, for our rows and the
  bench's peer alike.
- ``INFERENCE_PRECISION_HINT``: ``f32`` keeps FP32 numerics (the FP32 gates apply); ``bf16``
  runs MatMuls, attention and activations in bfloat16 with FP32 accumulation. OpenVINO's
  *default* on a CPU with ``avx512_bf16``/``amx_bf16`` is ``bf16``: a user loading our FP32
  file with default settings gets BF16 numerics, so the build names the precision explicitly.
- A QDQ (QuantizeLinear/DequantizeLinear) graph runs its quantized MatMuls as INT8 kernels
  (AMX/VNNI); the ops between them run at the precision hint.
- Static shapes (:class:`StaticShapeModel`, the ``STATIC_SHAPES`` config parameter): the
  graph reshaped to each padded input shape and compiled once per shape. The CPU plugin then
  plans its kernels (attention's fused subgraph included) for known sizes instead of
  dynamic ones: measured on the BBC MiniLM in BF16 at sequence 128 on an Intel CPU with AMX,
  1.13-1.15x at batch 1 and 0.98-1.13x at batch 8 over the dynamic-shape model (four bench
  runs, loaded machine); README.md has the AMD EPYC's figures for the promoted default.

- The compile cache (:func:`compile_cache_dir`, on unless ``INFERENCE_PIPELINE_OPENVINO_CACHE``
  is ``off``): every model compiled here goes through :func:`compile_on_cpu`, which passes
  OpenVINO's ``CACHE_DIR`` (``<cache root>/openvino``). OpenVINO keys a blob by the model's
  content (graph, weights, static shape) and the properties its CPU plugin declares as
  changing the blob (``CACHING_PROPERTIES``: the CPU's name alone), and refuses a blob written
  by another OpenVINO build; the CPU blob holds no precision or threading decision, those are
  applied when it is imported, so the precision hint and threading knobs are the caller's
  each time (the tests check outputs bit for bit, with and without the cache, and the knobs
  read back). A blob import is about 0.1 s against 0.3-0.6 s for compiling the MiniLM.
  OpenVINO writes a blob in place, so one process at a time compiles a given model file
  (:func:`phase01_common.locks.exclusive`): no reader sees a half-written blob and no writer
  truncates a blob another process has mapped.

ONNX Runtime's CPU provider has no BF16 MatMul kernel (a bfloat16 MatMul fails to load with
NOT_IMPLEMENTED), so BF16 on this project's CPU means OpenVINO.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
from phase01_common.cache import cache_root
from phase01_common.locks import exclusive

# OpenVINO's ``INFERENCE_PRECISION_HINT`` spelling of each precision a recipe computes in.
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
# /proc/cpuinfo flags of a CPU with native BF16 arithmetic (AVX-512 BF16 dot products or AMX).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The config.pbtxt parameter (value "true") that serves a model through StaticShapeModel.
STATIC_SHAPES_PARAMETER = "STATIC_SHAPES"
# Static shapes: the sequence axis is padded up to a multiple of SEQUENCE_BUCKET tokens and
# the batch axis up to a power of two, so the served shapes are few (8 sequence buckets up to
# 256 tokens x 6 batch sizes up to 32). Each compiled shape holds its own copy of the weights
# and buffers (measured on the MiniLM INT8 graph: about 0.5 s and 80 MB each), so at most
# MAX_COMPILED_SHAPES are kept and the least recently used one is dropped first.
SEQUENCE_BUCKET = 32
MAX_COMPILED_SHAPES = 8
# The compile cache: ``off`` in this variable compiles every model from scratch (to time a
# compile, or where the cache root is not writable); unset or ``on`` uses it.
COMPILE_CACHE_ENV = "INFERENCE_PIPELINE_OPENVINO_CACHE"
# A blob is about the size of the model's weights (60-90 MB for the MiniLM variants) and a
# static-shape model writes one per padded shape, so once the folder holds more than this
# the blobs written longest ago are deleted (a process that imported one keeps its copy).
MAX_CACHE_BYTES = 4 << 30


class OpenVinoError(RuntimeError):
    """A model OpenVINO cannot read or compile; the message names the file."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (empty where it is unreadable)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def bf16_unsupported_reason(flags: set[str] | None = None) -> str | None:
    """None when the CPU computes in BF16 natively; else one line saying why BF16 is skipped."""
    flags = cpu_flags() if flags is None else flags
    if any(flag in flags for flag in BF16_FLAGS):
        return None
    return f"this CPU has none of the BF16 flags {', '.join(BF16_FLAGS)} in /proc/cpuinfo"


# CPU pinning (``ENABLE_CPU_PINNING``): OpenVINO's default binds the inference thread to a
# core while it runs a request. Every model timed alone here (gates, promotion, the bench, its
# peer included) keeps that default, so our rows and "OpenVINO's default" differ only in
# precision, graph and shapes. A served model is compiled unpinned: a pinned thread cannot
# move off a core the server's event loop, tokenizer or another instance is using.
PIN_WHEN_ALONE = True
PIN_IN_SERVER = False


def threading_settings(
    threads: int, streams: int = 1, pinning: bool = PIN_WHEN_ALONE
) -> dict[str, object]:
    """The threading knobs of every OpenVINO model compiled here, declared once: the thread
    and stream counts (the counterpart of ONNX Runtime's intra-op threads and its one
    inter-op thread), and pinning, latency mode, core type and hyper-threading at OpenVINO's
    own CPU defaults (``pinning`` aside, see ``PIN_IN_SERVER``)."""
    return {
        "INFERENCE_NUM_THREADS": int(threads),
        "NUM_STREAMS": int(streams),
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": bool(pinning),
        "SCHEDULING_CORE_TYPE": "ANY_CORE",
        "ENABLE_HYPER_THREADING": True,
    }


def compile_settings(
    threads: int, hint: str | None = "f32", streams: int = 1, pinning: bool = PIN_WHEN_ALONE
) -> dict[str, object]:
    """The CPU properties of one compiled model: :func:`threading_settings` and ``hint``, an
    ``INFERENCE_PRECISION_HINT`` value (``f32`` or ``bf16``; None leaves OpenVINO to pick,
    what a user gets from ``compile_model(path)``: BF16 on a CPU with BF16 arithmetic)."""
    settings = threading_settings(threads, streams, pinning)
    if hint is None:
        return settings
    if hint not in PRECISION_HINTS.values():
        known = sorted(PRECISION_HINTS.values())
        raise ValueError(f"INFERENCE_PRECISION_HINT {hint!r}: served here are {known}")
    return {**settings, "INFERENCE_PRECISION_HINT": hint}


def _load_error(path: Path, exc: Exception) -> OpenVinoError:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return OpenVinoError(f"{path}: OpenVINO cannot load it ({first})")


def compile_cache_dir() -> Path | None:
    """Where compiled blobs live: ``<cache root>/openvino``, or None when
    ``INFERENCE_PIPELINE_OPENVINO_CACHE`` is ``off`` or the folder cannot be made."""
    switch = os.environ.get(COMPILE_CACHE_ENV, "on").strip().lower() or "on"
    if switch not in ("on", "off"):
        raise ValueError(f"{COMPILE_CACHE_ENV}={switch!r}: expected on or off")
    if switch == "off":
        return None
    folder = cache_root() / "openvino"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def _prune(folder: Path, max_bytes: int = MAX_CACHE_BYTES) -> None:
    blobs = []
    for blob in folder.glob("*.blob"):
        try:
            blobs.append((blob.stat().st_mtime, blob.stat().st_size, blob))
        except OSError:  # deleted meanwhile by another process
            continue
    total = sum(size for _, size, _ in blobs)
    for _, size, blob in sorted(blobs):
        if total <= max_bytes:
            break
        blob.unlink(missing_ok=True)
        total -= size


def compile_on_cpu(core, model, settings: dict[str, object], path: Path):
    """``core.compile_model(model, "CPU", settings)`` through the compile cache
    (:func:`compile_cache_dir`): imported from a blob OpenVINO wrote for the same model, CPU
    and OpenVINO build, else compiled and written there. ``path`` is the model's file: its
    name goes into the error, its size names the lock (a copy of the file shares it)."""
    folder = compile_cache_dir()
    try:
        if folder is None:
            return core.compile_model(model, "CPU", settings)
        with exclusive(folder / f"model-{Path(path).stat().st_size}"):
            compiled = core.compile_model(model, "CPU", {**settings, "CACHE_DIR": str(folder)})
            if not compiled.get_property("LOADED_FROM_CACHE"):
                _prune(folder)
        return compiled
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses for unreadable files
        raise _load_error(path, exc) from None


def compile_model(
    path: Path,
    threads: int = 1,
    hint: str | None = "f32",
    streams: int = 1,
    pinning: bool = PIN_WHEN_ALONE,
):
    """An ``openvino.CompiledModel`` of ``path`` (ONNX or IR) on the CPU, compiled with
    :func:`compile_settings`."""
    import openvino as ov

    settings = compile_settings(threads, hint, streams, pinning)
    core = ov.Core()
    try:
        model = core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses for unreadable files
        raise _load_error(path, exc) from None
    return compile_on_cpu(core, model, settings, path)


def padded_shape(batch: int, sequence: int) -> tuple[int, int]:
    """The static shape a ``[batch, sequence]`` input runs at: batch up to a power of two,
    sequence up to a multiple of :data:`SEQUENCE_BUCKET`."""
    if batch < 1 or sequence < 1:
        raise ValueError(f"input shape [{batch}, {sequence}]: both axes must be at least 1")
    padded_batch = 1 << (batch - 1).bit_length()
    padded_sequence = -(-sequence // SEQUENCE_BUCKET) * SEQUENCE_BUCKET
    return padded_batch, padded_sequence


class StaticShapeModel:
    """One model of the classifier's I/O contract (``[batch, sequence]`` integer inputs where
    0 is padding, per-row outputs) compiled once per padded input shape.

    ``run`` pads every input with zeros up to :func:`padded_shape` (an attention mask of 0
    masks the extra tokens; the extra rows are dropped from the outputs), so each text's
    outputs are those of its unpadded run up to kernel rounding, and it compiles a shape the
    first time it is seen."""

    def __init__(
        self,
        path: Path,
        threads: int = 1,
        hint: str | None = "f32",
        streams: int = 1,
        max_shapes: int = MAX_COMPILED_SHAPES,
        pinning: bool = PIN_WHEN_ALONE,
    ) -> None:
        import openvino as ov

        self.path = path
        self.settings = compile_settings(threads, hint, streams, pinning)
        self.max_shapes = max_shapes
        self.core = ov.Core()
        try:
            self.model = self.core.read_model(str(path))
        except Exception as exc:  # as compile_model: one line naming the file
            raise _load_error(path, exc) from None
        self.input_names = tuple(port.get_any_name() for port in self.model.inputs)
        self.output_names = tuple(port.get_any_name() for port in self.model.outputs)
        self.requests: OrderedDict[tuple[int, int], object] = OrderedDict()
        # compile_model calls so far, one per shape made (dropped ones included), whether
        # OpenVINO compiled it or imported it from the compile cache
        self.compiles = 0

    def _request(self, shape: tuple[int, int]):
        if shape in self.requests:
            self.requests.move_to_end(shape)
            return self.requests[shape]
        model = self.model.clone()
        model.reshape({name: list(shape) for name in self.input_names})
        compiled = compile_on_cpu(self.core, model, self.settings, self.path)
        self.compiles += 1
        self.requests[shape] = compiled.create_infer_request()
        while len(self.requests) > self.max_shapes:
            self.requests.popitem(last=False)
        return self.requests[shape]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch, sequence = feeds[self.input_names[0]].shape
        shape = padded_shape(batch, sequence)
        padded = {}
        for name in self.input_names:
            array = np.zeros(shape, dtype=feeds[name].dtype)
            array[:batch, :sequence] = feeds[name]
            padded[name] = array
        request = self._request(shape)
        request.infer(padded)
        # Copies: the request overwrites its output tensors on the next call.
        return {
            name: np.array(request.get_output_tensor(index).data[:batch], copy=True)
            for index, name in enumerate(self.output_names)
        }
