"""Export the GPT with its KV cache as explicit graph inputs and outputs.

Route: ``torch.export`` (the dynamo route) and then ``torch.onnx.export(ExportedProgram)``.
The TorchScript tracer would record Python-int shape arithmetic as constants and needs the
0-length past special-cased; ``torch.export`` records the symbolic shapes and their ranges, so
one graph covers an empty past (prefill) and a long one (decode), any batch and any number of
new tokens, and the same ExportedProgram is the PyTorch reference we save beside the ONNX file.

One graph, not two: prefill is "T new tokens, past length 0" and decode is "1 new token, past
length P"; the symbolic past length allows 0, so a separate prefill graph would only duplicate
the weights (and the quantization and the gates). A server may still want two ORT sessions
tuned for the two shapes; with one graph it can.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch
from torch.export import Dim

from inference_pipeline.generation.model import GPT, GPTConfig
from inference_pipeline.quiet import quiet

# ONNX symbolic dimension names (the exporter's own names are s0, s1, ...).
DIM_NAMES = {"batch": "batch", "new": "new_tokens", "past": "past_length"}
_SYMBOL = re.compile(r"\bs\d+\b")


def input_names(config: GPTConfig) -> list[str]:
    kv = [f"past_{kind}_{i}" for i in range(config.n_layer) for kind in ("key", "value")]
    return ["tokens", "positions", "attention_mask", *kv]


def output_names(config: GPTConfig) -> list[str]:
    kv = [f"new_{kind}_{i}" for i in range(config.n_layer) for kind in ("key", "value")]
    return ["logits", *kv]


def signature_tag(config: GPTConfig) -> str:
    """A short digest of the graph's input and output names: graphs of different signatures
    exported from one checkpoint are kept apart by it."""
    names = ",".join([*input_names(config), *output_names(config)])
    return hashlib.sha256(names.encode()).hexdigest()[:8]


def example_inputs(config: GPTConfig, batch: int = 2, new: int = 3, past: int = 5):
    tokens = torch.randint(0, config.vocab_size, (batch, new))
    positions = torch.arange(past, past + new).expand(batch, new).contiguous()
    mask = torch.ones(batch, past + new, dtype=torch.int64)
    kv = [
        torch.randn(batch, config.n_head, past, config.head_dim) for _ in range(2 * config.n_layer)
    ]
    return (tokens, positions, mask, *kv)


def export_program(model: GPT) -> torch.export.ExportedProgram:
    """The torch.export reference: batch, new-token and past lengths are symbolic."""
    c = model.config
    batch = Dim("batch", min=1, max=4096)
    new = Dim("new", min=1, max=c.max_positions)
    past = Dim("past", min=0, max=c.max_positions)
    total = Dim("total", min=1, max=2 * c.max_positions)  # = past + new, checked by the graph
    shapes = {
        "tokens": {0: batch, 1: new},
        "positions": {0: batch, 1: new},
        "attention_mask": {0: batch, 1: total},
        "past": tuple({0: batch, 2: past} for _ in range(2 * c.n_layer)),
    }
    with torch.no_grad():
        return torch.export.export(model.eval(), example_inputs(c), dynamic_shapes=shapes)


def _rename_dims(model_proto: onnx.ModelProto, config: GPTConfig) -> None:
    """Give the symbolic dims readable names, read off the known layout of each tensor."""
    graph = model_proto.graph
    by_name = {v.name: v for v in list(graph.input) + list(graph.output)}
    token_dims = by_name["tokens"].type.tensor_type.shape.dim
    past_dims = by_name["past_key_0"].type.tensor_type.shape.dim
    rename = {
        token_dims[0].dim_param: DIM_NAMES["batch"],
        token_dims[1].dim_param: DIM_NAMES["new"],
        past_dims[2].dim_param: DIM_NAMES["past"],
    }
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = _SYMBOL.sub(lambda m: rename.get(m[0], m[0]), dim.dim_param)


def export_onnx(model: GPT, onnx_path: Path, program_path: Path | None = None) -> Path:
    """Write ``onnx_path`` (and the ExportedProgram to ``program_path`` when given)."""
    program = export_program(model)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    if program_path is not None:
        program_path.parent.mkdir(parents=True, exist_ok=True)
        torch.export.save(program, program_path)
    with quiet("torch.onnx._internal.exporter._registration"):  # "torchvision is not installed"
        torch.onnx.export(
            program,
            (),
            str(onnx_path),
            input_names=input_names(model.config),
            output_names=output_names(model.config),
            dynamo=True,
            optimize=True,
            verbose=False,
        )
    proto = onnx.load(str(onnx_path))
    _rename_dims(proto, model.config)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(onnx_path))
    return onnx_path


def quantize_int8(fp32_path: Path, int8_path: Path) -> Path:
    """Dynamic INT8 (the classifier's quantizer): every op type ONNX Runtime quantizes
    (MatMul/Gemm weights stored as int8), per-tensor scales, activations quantized per call."""
    from inference_pipeline.quantize import quantize_int8_dynamic

    return quantize_int8_dynamic(fp32_path, int8_path, per_channel=False, op_types=None)


@dataclass(frozen=True)
class ExportedFiles:
    onnx_fp32: Path
    onnx_int8: Path
    program: Path


def export_all(model: GPT, folder: Path) -> ExportedFiles:
    files = ExportedFiles(folder / "model.onnx", folder / "model_int8.onnx", folder / "model.pt2")
    export_onnx(model, files.onnx_fp32, files.program)
    quantize_int8(files.onnx_fp32, files.onnx_int8)
    return files


def onnx_dims(path: Path) -> dict[str, list[str | int]]:
    """{tensor name: [dim_param or dim_value, ...]} for the graph's inputs and outputs."""
    proto = onnx.load(str(path), load_external_data=False)
    return {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(proto.graph.input) + list(proto.graph.output)
    }
