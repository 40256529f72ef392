"""Model execution backends behind one interface (ONNX Runtime, LiteRT, OpenVINO), and the
registry that names them.

A backend runs one batch: named NumPy arrays in, named NumPy arrays out. The server makes
one backend object per model instance and never calls one object from two threads at once,
so backends need not be thread-safe (LiteRT's interpreter is not).

:data:`BACKENDS` maps a ``config.pbtxt`` ``platform``/``backend`` name to its class, the
model file a version folder holds and the keyword options the class is built with. Adding
a backend is one class here and one entry there; the config reader, the model loader and
the repository checks all look names up in this table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from inference_pipeline.openvino_runtime import PIN_IN_SERVER


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
    """An ``onnxruntime.InferenceSession`` on the CPU (sessions release the GIL in ``run``),
    made by the one session factory, ``inference_pipeline.runtime.make_session``."""

    def __init__(self, path: Path, threads: int = 1, spinning: bool = False) -> None:
        from inference_pipeline.runtime import make_session

        try:
            self.session = make_session(path, threads, spinning=spinning)
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


class OpenVinoBackend:
    """An OpenVINO model on the CPU and its infer request (``infer`` releases the GIL), made
    by ``inference_pipeline.openvino_runtime``. Config parameters: ``INFERENCE_PRECISION_HINT``
    (``f32``/``bf16``) sets its compute precision, and without one OpenVINO picks (as
    Triton's OpenVINO backend does: BF16 on a CPU with BF16 arithmetic); ``STATIC_SHAPES``
    ``true`` compiles it once per padded input shape (``StaticShapeModel``) instead of once
    with dynamic shapes. ``pinning``: ``ENABLE_CPU_PINNING`` (served models: off, see
    ``openvino_runtime.PIN_IN_SERVER``)."""

    def __init__(
        self,
        path: Path,
        threads: int = 1,
        parameters: Mapping[str, str] | None = None,
        pinning: bool = PIN_IN_SERVER,
    ) -> None:
        from inference_pipeline.openvino_runtime import (
            STATIC_SHAPES_PARAMETER,
            OpenVinoError,
            StaticShapeModel,
            compile_model,
        )

        parameters = parameters or {}
        hint = parameters.get("INFERENCE_PRECISION_HINT")
        static = parameters.get(STATIC_SHAPES_PARAMETER, "false")
        if static not in ("true", "false"):
            raise BackendError(f"{STATIC_SHAPES_PARAMETER} {static!r}: expected true or false")
        self.static: StaticShapeModel | None = None
        try:
            if static == "true":
                self.static = StaticShapeModel(path, threads, hint, pinning=pinning)
            else:
                self.compiled = compile_model(path, threads, hint, pinning=pinning)
        except (OpenVinoError, ValueError) as exc:
            raise BackendError(str(exc)) from None
        if self.static is not None:
            self.input_names = self.static.input_names
            self.output_names = self.static.output_names
        else:
            self.request = self.compiled.create_infer_request()
            self.input_names = tuple(port.get_any_name() for port in self.compiled.inputs)
            self.output_names = tuple(port.get_any_name() for port in self.compiled.outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.static is not None:
            from inference_pipeline.openvino_runtime import OpenVinoError

            try:
                return self.static.run(feeds)
            except (OpenVinoError, ValueError) as exc:
                raise BackendError(str(exc)) from None
        self.request.infer(feeds)
        # Copies: the request overwrites its output tensors on the next call.
        return {
            name: np.array(self.request.get_output_tensor(index).data, copy=True)
            for index, name in enumerate(self.output_names)
        }


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend: ``names`` are the ``platform``/``backend`` spellings a
    config.pbtxt may use (the first is the canonical one), ``model_file`` is what a version
    folder holds, ``options`` are extra keyword arguments of ``backend_class``."""

    names: tuple[str, ...]
    backend_class: type
    model_file: str
    options: Mapping[str, object] = field(default_factory=dict)
    model_format: str = "onnx"  # "onnx": the repository checks the graph against the config
    takes_parameters: bool = False  # True: the class reads the config.pbtxt parameters

    @property
    def platform(self) -> str:
        return self.names[0]


# The options of a served model: ORT's spinning off (runtime.SPIN_IN_SERVER), OpenVINO's
# pinning off (openvino_runtime.PIN_IN_SERVER).
BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(("onnxruntime_onnx", "onnxruntime"), OnnxRuntimeBackend, "model.onnx",
                {"spinning": False}),
    BackendSpec(("litert", "tflite"), LiteRTBackend, "model.tflite", model_format="tflite"),
    BackendSpec(("openvino",), OpenVinoBackend, "model.onnx", {"pinning": PIN_IN_SERVER},
                takes_parameters=True),
)  # fmt: skip


def backend_spec(name: str) -> BackendSpec:
    """The registered backend a ``platform``/``backend`` name means (BackendError if none)."""
    for spec in BACKENDS:
        if name in spec.names:
            return spec
    known = sorted(n for spec in BACKENDS for n in spec.names)
    raise BackendError(f"platform/backend {name!r} is not served here (known: {known})")


def make_backend(
    platform: str,
    path: Path,
    threads: int,
    parameters: Mapping[str, str] | None = None,
    options: Mapping[str, object] | None = None,
) -> Backend:
    """One instance of the backend registered for ``platform``; ``parameters``: the
    config.pbtxt parameters, for a backend that reads them; ``options``: keyword options
    that replace the registry's (a model timed alone instead of served)."""
    spec = backend_spec(platform)
    keywords = {**spec.options, **(options or {})}
    if spec.takes_parameters:
        return spec.backend_class(path, threads, parameters or {}, **keywords)
    return spec.backend_class(path, threads, **keywords)
