"""Export routes, side by side: dynamo ONNX, TorchScript ONNX, and torch.export as reference.

- ``dynamo``: ``torch.onnx.export(..., dynamo=True)`` with dynamic batch and sequence axes
  (``torch.export`` underneath, translated to ONNX by onnxscript).
- ``torchscript``: the legacy tracer (``dynamo=False``) with ``dynamic_axes``.
- ``torch.export`` :class:`~torch.export.ExportedProgram`: not ONNX, the reference graph the
  two ONNX routes are compared with.

Traps guarded here (each has a test):

- The tracer records only the path the example input took. Model code that skips the mask
  when nothing is padded (older transformers did, for SDPA) is then exported *without* a
  mask, and padded batches drift. Every export here uses a padded example
  (:func:`example_inputs`), and the padding gate re-checks it on every variant.
- dynamo names values after the ops that made them: an embedding lookup's output is called
  ``embedding``, so asking for an output named ``embedding`` yields a graph with two
  definitions of that name, which ONNX Runtime refuses to load. :func:`_rename_outputs`
  renames the internal value first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from inference_pipeline.quiet import quiet
from inference_pipeline.tokenization import TextTokenizer

ROUTES = ("dynamo", "torchscript")
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("logits", "embedding")
TORCHSCRIPT_OPSET = 17  # the first with LayerNormalization as one op
# Two texts of different lengths: the example batch is padded (see the module docstring).
EXAMPLE_TEXTS = (
    "Shares rose after the bank reported record profits.",
    "The striker scored twice as the league leaders won again at home on Saturday night.",
)


class ExportError(RuntimeError):
    """An export produced a graph that does not keep the I/O contract."""


@dataclass
class ExportResult:
    route: str
    path: Path
    seconds: float
    op_counts: dict[str, int] = field(default_factory=dict)

    @property
    def node_count(self) -> int:
        return sum(self.op_counts.values())


def example_inputs(
    tokenizer: TextTokenizer, texts: tuple[str, ...] = EXAMPLE_TEXTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """A tokenized example batch; the default one has padding in its first row."""
    encoded = tokenizer.encode(list(texts))
    return torch.from_numpy(encoded["input_ids"]), torch.from_numpy(encoded["attention_mask"])


def duplicate_definitions(model: onnx.ModelProto) -> list[str]:
    """Names defined more than once (graph inputs, initializers, node outputs): ONNX requires
    each value name to be defined once, and ONNX Runtime refuses a model that breaks it."""
    graph = model.graph
    names = [i.name for i in graph.input] + [i.name for i in graph.initializer]
    names += [out for node in graph.node for out in node.output if out]
    return sorted(name for name, count in Counter(names).items() if count > 1)


def _rename_outputs(ir_model: object, names: tuple[str, ...]) -> None:
    """Give the graph outputs ``names`` without colliding with internal values (onnx_ir)."""
    graph = ir_model.graph
    outputs = list(graph.outputs)
    if len(outputs) != len(names):
        raise ExportError(f"expected {len(names)} graph outputs, got {len(outputs)}")
    wanted = set(names)
    for node in graph:
        for value in node.outputs:
            if value.name in wanted and value not in outputs:
                value.name = f"{value.name}_internal"
    for value in graph.inputs:
        if value.name in wanted:
            raise ExportError(f"an input is named {value.name!r}, which is an output name")
    for value, name in zip(outputs, names, strict=True):
        value.name = name


def export_dynamo(classifier: nn.Module, example: tuple[torch.Tensor, ...], path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=1024)
    sequence = torch.export.Dim("sequence", min=2, max=512)
    shapes = {name: {0: batch, 1: sequence} for name in INPUT_NAMES}
    with quiet("torch.onnx._internal.exporter._registration"):
        program = torch.onnx.export(
            classifier,
            example,
            dynamo=True,
            input_names=list(INPUT_NAMES),
            dynamic_shapes=shapes,
            optimize=True,
        )
    _rename_outputs(program.model, OUTPUT_NAMES)
    program.save(str(path))


def export_torchscript(
    classifier: nn.Module, example: tuple[torch.Tensor, ...], path: Path
) -> None:
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    axes |= {name: {0: "batch"} for name in OUTPUT_NAMES}
    with quiet("torch.onnx._internal.exporter._registration"):
        torch.onnx.export(
            classifier,
            example,
            str(path),
            dynamo=False,
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_axes=axes,
            opset_version=TORCHSCRIPT_OPSET,
        )


def export_onnx(
    classifier: nn.Module, route: str, example: tuple[torch.Tensor, ...], path: Path
) -> ExportResult:
    """Export ``classifier`` by ``route`` to ``path`` and check the I/O contract."""
    import time

    exporters = {"dynamo": export_dynamo, "torchscript": export_torchscript}
    if route not in exporters:
        raise ValueError(f"unknown export route {route!r}; routes: {', '.join(ROUTES)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    exporters[route](classifier.eval(), example, path)
    seconds = time.perf_counter() - start
    model = onnx.load(str(path))
    check_io_contract(model, str(path))
    return ExportResult(route, path, seconds, dict(Counter(n.op_type for n in model.graph.node)))


def export_program(
    classifier: nn.Module, example: tuple[torch.Tensor, ...]
) -> torch.export.ExportedProgram:
    """The torch.export reference: same dynamic axes as the dynamo route, no ONNX."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    sequence = torch.export.Dim("sequence", min=2, max=512)
    shapes = {name: {0: batch, 1: sequence} for name in INPUT_NAMES}
    with quiet("torch.onnx._internal.exporter._registration"):
        return torch.export.export(classifier.eval(), example, dynamic_shapes=shapes)


_ELEMENT_TYPES = {"input_ids": onnx.TensorProto.INT64, "attention_mask": onnx.TensorProto.INT64}


def check_io_contract(model: onnx.ModelProto, where: str) -> None:
    """Inputs input_ids/attention_mask INT64 [batch, sequence]; outputs logits [batch, 5] and
    embedding [batch, 384] (FP32, or FP16 inside an FP16 graph that keeps FP32 I/O); every
    value name defined once. Raises ExportError naming the first violation."""
    inputs = [i.name for i in model.graph.input]
    initializers = {i.name for i in model.graph.initializer}
    inputs = [name for name in inputs if name not in initializers]
    if tuple(inputs) != INPUT_NAMES:
        raise ExportError(f"{where}: inputs are {inputs}, expected {list(INPUT_NAMES)}")
    for value in model.graph.input:
        if value.name in _ELEMENT_TYPES:
            elem = value.type.tensor_type.elem_type
            if elem != _ELEMENT_TYPES[value.name]:
                raise ExportError(f"{where}: input {value.name} has element type {elem}")
            if len(value.type.tensor_type.shape.dim) != 2:
                raise ExportError(f"{where}: input {value.name} is not [batch, sequence]")
    outputs = [o.name for o in model.graph.output]
    if tuple(outputs) != OUTPUT_NAMES:
        raise ExportError(f"{where}: outputs are {outputs}, expected {list(OUTPUT_NAMES)}")
    for value, width in zip(model.graph.output, (5, 384), strict=True):
        dims = value.type.tensor_type.shape.dim
        if len(dims) != 2 or (dims[1].HasField("dim_value") and dims[1].dim_value != width):
            raise ExportError(f"{where}: output {value.name} is not [batch, {width}]")
    duplicates = duplicate_definitions(model)
    if duplicates:
        raise ExportError(f"{where}: value names defined more than once: {duplicates[:5]}")


def exported_program_outputs(
    program: torch.export.ExportedProgram, inputs: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        logits, embedding = program.module()(
            torch.from_numpy(inputs["input_ids"]), torch.from_numpy(inputs["attention_mask"])
        )
    return logits.numpy(), embedding.numpy()
