"""Shared by the offline tests: one small set of real artifacts per process.

``quick_build()`` is the quick build (``pipeline.build_cached(QUICK_BUILD)``: read back from
the on-disk cache, built once per settings and code). ``quick_artifacts()`` loads the quick
MiniLM model, takes its two FP32 exports from that build's repository instead of exporting
again (:func:`quick_graph` gives any other promoted graph of it) and computes the PyTorch
reference on a small gate set; every test file reuses the same objects, so the expensive
steps run once per pytest session. Broken models for the gate tests are made by editing a
copy of an exported graph (:func:`zero_weight`, :func:`ignore_attention_mask`,
:func:`produce_nan`).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper


@functools.cache
def quick_build():
    """The quick build's ``BuildResult`` (one per process; the build itself once per cache)."""
    from inference_pipeline.pipeline import QUICK_BUILD, build_cached

    return build_cached(QUICK_BUILD, progress=lambda _: None)


def quick_graph(recipe_name: str) -> Path:
    """The quick build's graph of the recipe row ``recipe_name``, in its repository (read-only:
    a test editing it works on a copy). Only promoted variants are in the repository."""
    from inference_pipeline.pipeline import variant_name
    from inference_pipeline.quantize import recipe

    name = variant_name(recipe(recipe_name))
    path = quick_build().repository / name / "1" / "model.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"the quick build did not promote {name}: no {path}")
    return path


@dataclass
class QuickArtifacts:
    folder: Path  # temporary, removed at exit
    trained: object  # inference_pipeline.model.TrainedModel
    tokenizer: object  # TextTokenizer
    exports: dict[str, Path]  # route -> plain FP32 export (the quick build's, read-only)
    gate_set: object  # GateSet
    reference: object  # Evaluation of PyTorch FP32 (SDPA) on gate_set


@functools.cache
def quick_artifacts() -> QuickArtifacts:
    from inference_pipeline.gates import build_gate_set, evaluate
    from inference_pipeline.model import load_or_train, torch_outputs
    from inference_pipeline.pipeline import QUICK_BUILD
    from inference_pipeline.quantize import RECIPES
    from inference_pipeline.tokenization import TextTokenizer

    folder = Path(tempfile.mkdtemp(prefix="inference_pipeline_test_"))
    atexit.register(shutil.rmtree, folder, True)
    exports = {row.route: quick_graph(row.name) for row in RECIPES if row.method == "export"}
    trained = load_or_train(QUICK_BUILD.train, progress=lambda _: None)
    tokenizer = TextTokenizer.from_checkpoint()
    gate_set = build_gate_set(tokenizer, dev_per_label=2, ladder_per_length=1)
    eager = trained.classifier("sdpa")
    reference = evaluate(lambda batch: torch_outputs(eager, batch), tokenizer, gate_set)
    return QuickArtifacts(folder, trained, tokenizer, exports, gate_set, reference)


def gate_onnx(path: Path, recipe_name: str = "fp32"):
    """Gate report of an ONNX file against the quick reference, with the gates of the recipe
    ``recipe_name`` (a row of ``quantize.RECIPES``)."""
    from inference_pipeline.gates import apply_gates, evaluate
    from inference_pipeline.quantize import recipe
    from inference_pipeline.runtime import make_session, session_runner

    art = quick_artifacts()
    runner = session_runner(make_session(path))
    candidate = evaluate(runner, art.tokenizer, art.gate_set)
    checks = recipe(recipe_name).gates
    return apply_gates(path.stem, checks, candidate, art.reference, art.gate_set)


# ------------------------------------------------------------------------------------------
# Deliberately broken models (graph edits on a copy of an export).


def zero_weight(src: Path, dst: Path, name_part: str = "classifier") -> Path:
    """Zero the largest initializer whose name contains ``name_part`` (a lost weight)."""
    model = onnx.load(str(src))
    candidates = [i for i in model.graph.initializer if name_part in i.name]
    if not candidates:  # TorchScript names weights by onnx::MatMul_N: take the largest 2-D
        candidates = [i for i in model.graph.initializer if len(i.dims) == 2]
    target = max(candidates, key=lambda i: int(np.prod(i.dims)))
    target.CopyFrom(
        numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(target)), target.name)
    )
    onnx.save(model, str(dst))
    return dst


def ignore_attention_mask(src: Path, dst: Path) -> Path:
    """Every use of ``attention_mask`` replaced by ones of the same shape: a model that
    attends to (and pools over) padding."""
    model = onnx.load(str(src))
    ones = "attention_mask_ignored"
    shape = helper.make_node("Shape", ["attention_mask"], ["attention_mask_shape"])
    fill = helper.make_node(
        "ConstantOfShape",
        ["attention_mask_shape"],
        [ones],
        value=helper.make_tensor("one", onnx.TensorProto.INT64, [1], [1]),
    )
    for node in model.graph.node:
        node.input[:] = [ones if name == "attention_mask" else name for name in node.input]
    model.graph.node.insert(0, fill)
    model.graph.node.insert(0, shape)
    onnx.save(model, str(dst))
    return dst


def produce_nan(src: Path, dst: Path) -> Path:
    """One LayerNorm gain set to NaN: every output downstream turns NaN."""
    model = onnx.load(str(src))
    norms = {n.input[1] for n in model.graph.node if "LayerNorm" in n.op_type}
    target = next(i for i in model.graph.initializer if i.name in norms)
    values = numpy_helper.to_array(target).copy()
    values[0] = np.nan
    target.CopyFrom(numpy_helper.from_array(values, target.name))
    onnx.save(model, str(dst))
    return dst


def small_repository(root: Path) -> Path:
    """A real repository from the quick exports: both FP32 routes, gated, written by the
    pipeline's own writer (no fusion or quantization, to stay fast)."""
    from inference_pipeline.pipeline import Variant, write_repository
    from inference_pipeline.quantize import RECIPES

    art = quick_artifacts()
    exports = {row.route: row for row in RECIPES if row.method == "export"}
    variants = []
    for route, path in art.exports.items():
        row = exports[route]
        variant = Variant(f"bbc_minilm_fp32_{route}", row, row.made_by, path)
        variant.gates = gate_onnx(path)
        variants.append(variant)
    repo = root / "model_repository"
    repo.mkdir(parents=True)
    write_repository(
        repo, variants, [], art.trained.label_names, art.tokenizer, art.gate_set, art.reference
    )
    return repo


@functools.cache
def shared_repository() -> Path:
    """One :func:`small_repository` per process (tests copy it before editing it)."""
    return small_repository(quick_artifacts().folder / "shared")
