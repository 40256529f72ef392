"""Model execution backends behind one interface: ONNX Runtime and LiteRT.

A backend runs one batch: named NumPy arrays in, named NumPy arrays out. The server makes
one backend object per model instance and never calls one object from two threads at once,
so backends need not be thread-safe (LiteRT's interpreter is not).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np


class BackendError(RuntimeError):
    """A model file that cannot be loaded; the message names the file."""


class Backend(Protocol):
    """What the server needs from a model runtime."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def default_threads(instances: int) -> int:
    """Intra-op threads per instance so instances together use the machine's cores."""
    return max(1, (os.cpu_count() or 1) // max(instances, 1))


class OnnxRuntimeBackend:
    """An ``onnxruntime.InferenceSession`` on the CPU (sessions release the GIL in ``run``)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # ORT's idle intra-op threads spin by default, taking the CPU the event loop needs to
        # parse the next requests while a batch is assembled; on this 2-core machine turning
        # it off raised the served throughput 2-3x at concurrency 16 (batched and not)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises several types for a bad file
            raise BackendError(f"{path}: ONNX Runtime cannot load it ({exc})") from None
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.session.run(list(self.output_names), feeds)
        return dict(zip(self.output_names, outputs, strict=True))


class LiteRTBackend:
    """A LiteRT (TFLite) interpreter; inputs are resized to each batch's shape."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        from ai_edge_litert.interpreter import Interpreter

        try:
            self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
            self.interpreter.allocate_tensors()
        except Exception as exc:
            raise BackendError(f"{path}: LiteRT cannot load it ({exc})") from None
        self._inputs = {d["name"]: d for d in self.interpreter.get_input_details()}
        self._outputs = {d["name"]: d for d in self.interpreter.get_output_details()}
        self.input_names = tuple(self._inputs)
        self.output_names = tuple(self._outputs)
        self._shapes: dict[str, tuple[int, ...]] = {
            name: tuple(d["shape"]) for name, d in self._inputs.items()
        }

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        interpreter = self.interpreter
        resized = False
        for name, array in feeds.items():
            if self._shapes[name] != array.shape:
                interpreter.resize_tensor_input(self._inputs[name]["index"], array.shape)
                self._shapes[name] = array.shape
                resized = True
        if resized:
            interpreter.allocate_tensors()
        for name, array in feeds.items():
            detail = self._inputs[name]
            interpreter.set_tensor(detail["index"], array.astype(detail["dtype"], copy=False))
        interpreter.invoke()
        return {name: interpreter.get_tensor(d["index"]) for name, d in self._outputs.items()}


def make_backend(platform: str, path: Path, threads: int) -> Backend:
    """The backend for a config's platform ("onnxruntime_onnx" or "litert")."""
    if platform == "onnxruntime_onnx":
        return OnnxRuntimeBackend(path, threads)
    if platform == "litert":
        return LiteRTBackend(path, threads)
    raise BackendError(f"no backend for platform {platform!r}")
