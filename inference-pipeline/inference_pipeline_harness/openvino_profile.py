"""`bench --profile-openvino`: where OpenVINO's time goes, node type by node type, for its
default on our FP32 export and for the promoted default variant, at batch 1 and batch 8.

OpenVINO's own counters (``PERF_COUNT``, ``InferRequest.get_profiling_info``) give each
executed node of the compiled graph its time and kernel (``exec_type``, whose suffix is the
precision it ran in: ``bf16``, ``f32``, ``i8``). Nodes are summed per node type and
precision, and attention's fused subgraph (Q x K^T, scale, mask, Softmax, x V: one
``Subgraph`` node per layer) is told apart from other fused subgraphs. The two models run in
interleaved rounds at 1 thread (as the bench times them); each figure is the fastest of the
rounds for that category's per-call sum: on a shared machine other processes only ever add
time to a node, so the minimum is the node's own cost, and the medians of whole calls are
printed beside it.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

SEQUENCE = 128
BATCHES = (1, 8)
# The layer whose nodes the table also lists one by one (every layer has the same shapes).
LAYER = "layer.2/"


def node_category(node_type: str, exec_type: str, node_name: str) -> str:
    """``"<node type> <precision>"``; attention's fused subgraph gets its own name."""
    precision = exec_type.rsplit("_", 1)[-1].lower() if "_" in exec_type else exec_type
    if node_type == "FullyConnectedQuantizedLegacy":
        node_type = "FullyConnected"
    if node_type == "Subgraph" and "attention/self" in node_name:
        node_type = "Subgraph (attention)"
    return f"{node_type} {precision}"


def node_label(node_name: str) -> str:
    """The short name of an encoder node: the part after the layer, ``/MatMul...`` cut."""
    tail = node_name.split(LAYER, 1)[-1]
    return tail.split("/MatMul")[0].split("/Add")[0] or tail


def _request(path: Path, hint: str | None, static: bool, batch: int):
    import openvino as ov
    from inference_pipeline.openvino_runtime import compile_on_cpu, compile_settings, padded_shape

    core = ov.Core()
    model = core.read_model(str(path))
    if static:
        model.reshape({p.get_any_name(): list(padded_shape(batch, SEQUENCE)) for p in model.inputs})
    settings = {**compile_settings(1, hint), "PERF_COUNT": True}
    return compile_on_cpu(core, model, settings, path).create_infer_request()


def profile(
    models: dict[str, tuple[Path, str | None, bool]], batch: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Per model name ``(path, precision hint or None for OpenVINO's defaults, static
    shapes)``: category -> fastest ms per call over the rounds, plus ``"wall"`` (the call's
    median), ``"fastest"`` (the fastest call) and ``"nodes"`` (the sum of the categories)."""
    from inference_pipeline_harness.bench import fixed_length_inputs

    inputs = fixed_length_inputs(batch, SEQUENCE)
    requests = {name: _request(*spec, batch) for name, spec in models.items()}
    for request in requests.values():
        for _ in range(3):
            request.infer(inputs)
    samples: dict[str, dict[str, list[float]]] = {n: defaultdict(list) for n in requests}
    for _ in range(rounds):
        for name, request in requests.items():
            start = time.perf_counter()
            request.infer(inputs)
            samples[name]["wall"].append((time.perf_counter() - start) * 1e3)
            sums: dict[str, float] = defaultdict(float)
            for node in request.get_profiling_info():
                if node.status == node.Status.EXECUTED:
                    key = node_category(node.node_type, node.exec_type, node.node_name)
                    ms = node.real_time.total_seconds() * 1e3
                    sums[key] += ms
                    if LAYER in node.node_name and ms > 0.0:
                        sums[f"{LAYER}{node_label(node.node_name)} {key}"] += ms
            for key, ms in sums.items():
                samples[name][key].append(ms)
    result = {}
    for name, by_key in samples.items():
        fastest = {key: float(np.min(ms)) for key, ms in by_key.items()}
        fastest["wall"] = float(np.median(by_key["wall"]))
        fastest["fastest"] = float(np.min(by_key["wall"]))
        categories = [k for k in fastest if k not in ("wall", "fastest")]
        fastest["nodes"] = sum(fastest[k] for k in categories if not k.startswith(LAYER))
        result[name] = fastest
    return result


def _promoted_spec(repo: Path, name: str) -> tuple[Path, str | None, bool]:
    """``profile``'s spec of an OpenVINO model folder: its file, precision hint and shapes."""
    from inference_pipeline.openvino_runtime import STATIC_SHAPES_PARAMETER
    from inference_pipeline.repository import load_model_folder

    folder = load_model_folder(repo / name)
    if (folder.config.backend or folder.config.platform) != "openvino":
        raise ValueError(f"{name} is not an OpenVINO model: nothing to profile")
    parameters = {k: v.string_value for k, v in folder.config.parameters.items()}
    return (
        folder.onnx_path,
        parameters.get("INFERENCE_PRECISION_HINT"),
        parameters.get(STATIC_SHAPES_PARAMETER) == "true",
    )


def profile_table(repo: Path, rounds: int = 20, progress=print) -> str:
    """The per-category table of OpenVINO's default (FP32 export) and the promoted default
    of ``repo`` at batch 1 and 8 (the manifest's fastest variant at each batch, the one the
    bench's target reads)."""
    from inference_pipeline.repository import load_model_folder, read_manifest

    manifest = read_manifest(repo)
    fp32 = next(v for v in manifest["variants"] if v["recipe"] == "fp32" and v["promoted"])
    by_batch = manifest.get("default_variant", {}).get("by_batch", {})
    missing = [batch for batch in BATCHES if str(batch) not in by_batch]
    if missing:
        raise ValueError(f"{repo}: the manifest records no promoted default at batch {missing}")
    default_path = load_model_folder(repo / fp32["name"]).onnx_path
    promoted = {batch: by_batch[str(batch)]["variant"] for batch in BATCHES}
    columns, results = [], []
    for batch in BATCHES:
        models = {
            "OV default": (default_path, None, False),
            "promoted": _promoted_spec(repo, promoted[batch]),
        }
        progress(f"profiling batch {batch}: {rounds} interleaved rounds, 1 thread")
        result = profile(models, batch, rounds)
        for name in models:
            columns.append(f"{'default' if name == 'OV default' else 'promoted'} b{batch}")
            results.append(result[name])
    every = {k for r in results for k in r} - {"wall", "fastest", "nodes"}
    keys = sorted(
        (k for k in every if not k.startswith(LAYER)),
        key=lambda k: -max(r.get(k, 0.0) for r in results),
    )
    layer_keys = sorted(
        (k for k in every if k.startswith(LAYER)),
        key=lambda k: -max(r.get(k, 0.0) for r in results),
    )
    names = ", ".join(f"b{batch} {name}" for batch, name in promoted.items())
    lines = [f"promoted = {names}; fastest ms per call, summed per node type and precision"]
    lines.append(f"{'node type, precision':34}" + "".join(f"{c:>13}" for c in columns))
    for key in keys:
        values = [r.get(key, 0.0) for r in results]
        if max(values) < 0.05:
            continue
        lines.append(f"{key:34}" + "".join(f"{v:13.2f}" for v in values))
    labels = {"nodes": "sum of nodes", "fastest": "fastest call", "wall": "median call"}
    for key, label in labels.items():
        lines.append(f"{label:34}" + "".join(f"{r[key]:13.2f}" for r in results))
    lines.append(f"one encoder layer ({LAYER[:-1]}), node by node:")
    for key in layer_keys:
        values = [r.get(key, 0.0) for r in results]
        if max(values) < 0.05:
            continue
        lines.append(f"{key[len(LAYER) :]:50}" + "".join(f"{v:9.2f}" for v in values))
    return "\n".join(lines)


def main(repository: str | None, rounds: int) -> int:
    """Print :func:`profile_table` of ``repository`` (default: the cached full build)."""
    from inference_pipeline.repository import RepositoryError

    if rounds < 1:
        print("error: --iterations must be at least 1", file=sys.stderr)
        return 2
    if repository and not Path(repository).is_dir():
        print(f"error: {repository}: no such model repository folder", file=sys.stderr)
        return 2
    if repository:
        repo = Path(repository)
    else:
        from inference_pipeline.pipeline import build_cached

        repo = build_cached().repository
    try:
        print(profile_table(repo, rounds=rounds))
    except (RepositoryError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
