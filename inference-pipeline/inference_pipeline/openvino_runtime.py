"""OpenVINO on the CPU: one compiled-model factory (threads, streams, precision), a runner
with the same contract as ONNX Runtime's, and the CPU's BF16 capability.

OpenVINO reads our ``.onnx`` files directly (its ONNX front end), so an OpenVINO variant is
the same file as an ONNX Runtime one plus the settings it is compiled with. The settings that
matter here:

- ``INFERENCE_NUM_THREADS`` / ``NUM_STREAMS``: the counterpart of ONNX Runtime's intra-op
  threads and its one inter-op thread (one stream = one request at a time, ``threads``
  cores for it).
- ``INFERENCE_PRECISION_HINT``: ``f32`` keeps FP32 numerics (the FP32 gates apply); ``bf16``
  runs MatMuls, attention and activations in bfloat16 with FP32 accumulation. OpenVINO's
  *default* on a CPU with ``avx512_bf16``/``amx_bf16`` is ``bf16``: a user loading our FP32
  file with default settings gets BF16 numerics, so the build names the precision explicitly.
- A QDQ (QuantizeLinear/DequantizeLinear) graph runs its quantized MatMuls as INT8 kernels
  (AMX/VNNI); the ops between them run at the precision hint.

ONNX Runtime's CPU provider has no BF16 MatMul kernel (a bfloat16 MatMul fails to load with
NOT_IMPLEMENTED), so BF16 on this project's CPU means OpenVINO.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inference_pipeline.runtime import Outputs, Runner

# OpenVINO's ``INFERENCE_PRECISION_HINT`` spellings, by our precision names.
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
# /proc/cpuinfo flags of a CPU with native BF16 arithmetic (AVX-512 BF16 dot products or AMX).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


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


def compile_settings(threads: int, precision: str, streams: int = 1) -> dict[str, object]:
    """The OpenVINO CPU properties of one compiled model (see the module docstring)."""
    if precision not in PRECISION_HINTS:
        raise ValueError(f"precision {precision!r}: OpenVINO variants are {list(PRECISION_HINTS)}")
    return {
        "INFERENCE_NUM_THREADS": int(threads),
        "NUM_STREAMS": int(streams),
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision],
        # Pinning would bind the inference threads to cores the server's event loop and
        # tokenizer also need; ONNX Runtime sessions are not pinned either.
        "ENABLE_CPU_PINNING": False,
    }


def compile_model(path: Path, threads: int = 1, precision: str = "fp32", streams: int = 1):
    """An ``openvino.CompiledModel`` of ``path`` (ONNX or IR) on the CPU."""
    import openvino as ov

    settings = compile_settings(threads, precision, streams)
    try:
        core = ov.Core()
        return core.compile_model(core.read_model(str(path)), "CPU", settings)
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses for unreadable files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OpenVinoError(f"{path}: OpenVINO cannot load it ({first})") from None


class OpenVinoModel:
    """One compiled model and its one infer request: named arrays in, named arrays out.
    ``infer`` releases the GIL while it runs; one object must not be called from two threads
    at once (the request's output buffers are reused)."""

    def __init__(
        self, path: Path, threads: int = 1, precision: str = "fp32", streams: int = 1
    ) -> None:
        self.compiled = compile_model(path, threads, precision, streams)
        self.request = self.compiled.create_infer_request()
        self.input_names = tuple(port.get_any_name() for port in self.compiled.inputs)
        self.output_names = tuple(port.get_any_name() for port in self.compiled.outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.request.infer(feeds)
        # Copies: the request overwrites its output tensors on the next call.
        return {
            name: np.array(self.request.get_output_tensor(index).data, copy=True)
            for index, name in enumerate(self.output_names)
        }


def openvino_runner(model: OpenVinoModel) -> Runner:
    """The gates' and the bench's ``Runner`` over an OpenVINO model: (logits, embedding)."""

    def run(inputs: dict[str, np.ndarray]) -> Outputs:
        out = model.run(inputs)
        return np.asarray(out["logits"], np.float32), np.asarray(out["embedding"], np.float32)

    return run
