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

# OpenVINO's ``INFERENCE_PRECISION_HINT`` spelling of each precision a recipe computes in.
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


def compile_settings(threads: int, hint: str = "f32", streams: int = 1) -> dict[str, object]:
    """The OpenVINO CPU properties of one compiled model (see the module docstring);
    ``hint`` is an ``INFERENCE_PRECISION_HINT`` value, ``f32`` or ``bf16``."""
    if hint not in PRECISION_HINTS.values():
        known = sorted(PRECISION_HINTS.values())
        raise ValueError(f"INFERENCE_PRECISION_HINT {hint!r}: served here are {known}")
    return {
        "INFERENCE_NUM_THREADS": int(threads),
        "NUM_STREAMS": int(streams),
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": hint,
        # Pinning would bind the inference threads to cores the server's event loop and
        # tokenizer also need; ONNX Runtime's threads are not pinned either.
        "ENABLE_CPU_PINNING": False,
    }


def compile_model(path: Path, threads: int = 1, hint: str | None = "f32", streams: int = 1):
    """An ``openvino.CompiledModel`` of ``path`` (ONNX or IR) on the CPU; ``hint=None``
    compiles with OpenVINO's own defaults (what a user gets from ``compile_model(path)``)."""
    import openvino as ov

    settings = (
        compile_settings(threads, hint, streams)
        if hint is not None
        else {"INFERENCE_NUM_THREADS": int(threads), "NUM_STREAMS": int(streams)}
    )
    try:
        core = ov.Core()
        return core.compile_model(core.read_model(str(path)), "CPU", settings)
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses for unreadable files
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise OpenVinoError(f"{path}: OpenVINO cannot load it ({first})") from None
