"""Graph optimization: ONNX Runtime's own passes and its transformer fusions, per export route.

Two offline fusion tools, because each recognises a different graph:

- ``onnxruntime.transformers.optimizer`` (model_type "bert") matches the patterns the
  TorchScript exporter emits: Attention, EmbedLayerNormalization, SkipLayerNormalization,
  BiasGelu. On a dynamo export it finds the LayerNorm/Gelu patterns but not attention.
- onnxscript's ORT fusion rewriter (``onnxscript.rewriter.ort_fusions``) works on the ONNX
  IR the dynamo exporter produces and fuses its attention into MultiHeadAttention/Attention.

ONNX Runtime then applies its own graph optimizations at session creation (constant folding,
MatMul+Add, Gelu, LayerNorm fusions...); :func:`ort_graph_op_counts` shows what they did.
Fusion is not assumed to be a win: the bench times fused and unfused graphs side by side.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from inference_pipeline.export import check_io_contract
from inference_pipeline.model import EMBEDDING_SIZE, NUM_HEADS
from inference_pipeline.quiet import quiet
from inference_pipeline.runtime import make_session

ORT_TRANSFORMER_OPTIMIZER = "onnxruntime.transformers.optimizer"
ONNXSCRIPT_REWRITER = "onnxscript.rewriter.ort_fusions"
# The fusion tool each route's fused variant uses (the one that fuses its attention).
FUSION_TOOL_FOR_ROUTE = {"torchscript": ORT_TRANSFORMER_OPTIMIZER, "dynamo": ONNXSCRIPT_REWRITER}


@dataclass
class FusionReport:
    route: str
    tool: str
    counts: dict[str, int] = field(default_factory=dict)  # fusion -> how many (non-zero only)
    path: Path | None = None

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)


def fuse_with_ort_optimizer(src: Path, dst: Path | None, route: str) -> FusionReport:
    """ONNX Runtime's BERT fusions (opt_level 0: fusions only, ORT's passes run at load)."""
    from onnxruntime.transformers.optimizer import optimize_model

    with quiet("onnxruntime.transformers"):
        optimized = optimize_model(
            str(src),
            model_type="bert",
            num_heads=NUM_HEADS,
            hidden_size=EMBEDDING_SIZE,
            opt_level=0,
        )
        counts = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
        if dst is not None:
            optimized.save_model_to_file(str(dst))
    return FusionReport(route, ORT_TRANSFORMER_OPTIMIZER, counts, dst)


def fuse_with_onnxscript(src: Path, dst: Path | None, route: str) -> FusionReport:
    """onnxscript's ORT fusion rewriter (for dynamo exports)."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    with quiet("onnxruntime.transformers"):
        model = ir.load(str(src))
        model, stats = optimize_for_ort(model)
        counts = {k: int(v) for k, v in stats.items() if v}
        if dst is not None:
            ir.save(model, str(dst))
    return FusionReport(route, ONNXSCRIPT_REWRITER, counts, dst)


def fuse(src: Path, dst: Path, route: str) -> FusionReport:
    """The route's fused variant, written to ``dst`` and checked against the I/O contract."""
    tool = FUSION_TOOL_FOR_ROUTE[route]
    fuser = fuse_with_ort_optimizer if tool == ORT_TRANSFORMER_OPTIMIZER else fuse_with_onnxscript
    report = fuser(src, dst, route)
    check_io_contract(onnx.load(str(dst)), str(dst))
    return report


def ort_graph_op_counts(path: Path, level: str = "extended") -> dict[str, int]:
    """Operator counts of the graph ONNX Runtime actually runs after its own optimizations."""
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        make_session(path, threads=1, level=level, optimized_path=optimized)
        model = onnx.load(str(optimized))
    return dict(Counter(node.op_type for node in model.graph.node))
