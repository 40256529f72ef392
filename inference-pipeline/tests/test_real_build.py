"""The quick build's real artifacts (conftest's ``quick_build``): its INT8 variants pass their
gates, a broken INT8 graph is refused, the served MiniLM answers equal PyTorch's logits over
HTTP, and SIGTERM under load loses nothing on the real model."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from inference_pipeline import repository
from inference_pipeline.gates import GATES, Evaluation, GateSet, apply_gates, evaluate
from inference_pipeline.model import torch_outputs
from inference_pipeline.pipeline import default_models, gate_repository
from inference_pipeline.quantize import primary_recipes, recipe
from inference_pipeline.runtime import backend_runner, make_session, session_runner
from inference_pipeline.serving.models import load_model, repository_folders
from inference_pipeline.tokenization import TextTokenizer
from inference_pipeline_harness.scenarios import zero_weight
from inference_pipeline_harness.serving_fixtures import (
    accepted_or_refused_at_the_door,
    infer_json,
    one_torch_thread,
    sample_texts,
    server_process,
    sigterm_under_load,
    threaded_server,
)


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


def by_precision(result, precision: str) -> list:
    return [v for v in result.variants if v.precision == precision]


def test_every_recipe_was_built_and_gated(quick_build) -> None:
    built = [v.recipe for v in quick_build.variants]
    for row in primary_recipes():  # each primary row, or the fallback that replaced it
        assert row in built or (row.fallback and recipe(row.fallback) in built), row.name
    for variant in quick_build.variants:
        assert variant.gates is not None, variant.name
        assert len(variant.gates.results) == len(variant.recipe.gates), variant.name


def test_int8_dynamic_and_static_pass_their_gates(quick_build) -> None:
    # ONNX Runtime's INT8 graphs (OpenVINO's rows run on a BF16 CPU only, and are tested
    # in test_openvino.py)
    int8 = [v for v in by_precision(quick_build, "int8") if v.recipe.runtime == "onnxruntime"]
    methods = {v.recipe.method for v in int8}
    assert methods == {"int8_dynamic", "int8_static"}
    for variant in int8:
        failed = [r.describe() for r in variant.gates.failed]
        assert variant.promoted, f"{variant.name} refused: {failed}"
        assert (quick_build.repository / variant.name / "1" / "model.onnx").is_file()
    manifest = repository.read_manifest(quick_build.repository)
    promoted = {e["name"] for e in manifest["variants"] if e["promoted"]}
    assert {v.name for v in int8} <= promoted


def test_gate_rerun_on_the_default_models_reads_them_from_disk(quick_build) -> None:
    manifest = repository.read_manifest(quick_build.repository)
    record = manifest["default_variant"]
    names = default_models(manifest)
    assert names[0] == record["served"]
    assert set(names) == {record["served"], *(c["variant"] for c in record["by_batch"].values())}
    logged: list[str] = []
    reports = gate_repository(quick_build.repository, threads=2, progress=logged.append, only=names)
    assert [r.variant for r in reports] == [
        e["name"] for e in manifest["variants"] if e["name"] in names
    ]
    built = {v.name: v.gates for v in quick_build.variants}
    for report in reports:  # the same gates, the same values as at build time
        assert report.passed, report.failed
        again = {r.name: r.value for r in report.results}
        assert again == pytest.approx(
            {r.name: r.value for r in built[report.variant].results}, rel=1e-4, abs=1e-5
        )
    assert not any("skipped" in line for line in logged)  # only promoted models were named


def test_a_broken_int8_graph_is_refused(quick_build, tmp_path) -> None:
    repo = quick_build.repository
    gate_set = GateSet.load(repo / repository.GATE_SET)
    reference = Evaluation.load(repo / repository.GATE_REFERENCE)
    tokenizer = TextTokenizer.from_checkpoint()
    variant = next(v for v in by_precision(quick_build, "int8") if v.promoted)
    graph = repo / variant.name / "1" / "model.onnx"
    broken = zero_weight(graph, tmp_path / "broken.onnx")  # the topic head's weights lost
    candidate = evaluate(session_runner(make_session(broken, 1)), tokenizer, gate_set)
    report = apply_gates(variant.name, variant.recipe.gates, candidate, reference, gate_set)
    assert not report.passed
    failed = {r.name for r in report.failed}
    assert any("argmax" in name or "accuracy" in name for name in failed), failed
    # the intact graph, gated the same way, passes: the failure is the edit's
    intact = evaluate(session_runner(make_session(graph, 1)), tokenizer, gate_set)
    assert apply_gates(variant.name, variant.recipe.gates, intact, reference, gate_set).passed


def logits_and_embedding(answer: dict) -> tuple[np.ndarray, np.ndarray]:
    found = {}
    for output in answer["outputs"]:
        if output["name"] in ("logits", "embedding"):
            found[output["name"]] = np.array(output["data"], np.float32).reshape(output["shape"])
    return found["logits"], found["embedding"]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


LOGIT_LIMITS = {
    "fp32": GATES.fp32_max_abs_logit_diff,
    "fp16": GATES.fp16_max_abs_logit_diff,
    "bf16": GATES.bf16_max_abs_logit_diff,
}


def served_kinds(variants) -> dict[tuple, str]:
    """The first promoted variant of each way of serving one: runtime, precision and shapes
    (the server's path is the same for every variant of one kind; each variant's graph is
    gated at build time and by the `gate` re-runs)."""
    kinds: dict[tuple, str] = {}
    for v in variants:
        if v.promoted:
            kinds.setdefault((v.runtime, v.precision, v.recipe.static_shapes), v.name)
    return kinds


def test_served_minilm_answers_equal_pytorch_over_http(quick_build, quick_trained) -> None:
    # the held-out texts the gates run alone (the length ladder: 4 to 256 tokens, the
    # tokenizer's maximum), one per request, each answer against PyTorch on that text alone,
    # for one variant of each kind (the gate set's other texts are articles, most of them
    # cut at 256 tokens: more of the ladder's longest shape)
    repo = quick_build.repository
    gate_set = GateSet.load(repo / repository.GATE_SET)
    texts = [gate_set.texts[i] for i in gate_set.alone]
    tokenizer = TextTokenizer.from_checkpoint()
    eager = quick_trained.classifier("sdpa")
    expected = [torch_outputs(eager, tokenizer.encode([t])) for t in texts]
    want = np.concatenate([e[0] for e in expected])
    want_embedding = np.concatenate([e[1] for e in expected])
    folders, _ = repository_folders(repo)  # what `serve` loads from the repository
    promoted = {v.name: v for v in quick_build.variants if v.promoted}
    assert {folder.name for folder, _ in folders} == set(promoted)
    kinds = served_kinds(quick_build.variants)
    assert {precision for _, precision, _ in kinds} >= {"fp32", "int8"}
    models = [
        load_model(folder, threads=1, proto=config)
        for folder, config in folders
        if folder.name in kinds.values()
    ]
    assert len(models) == len(kinds)
    with threaded_server(models) as (url, _), ThreadPoolExecutor(8) as pool:
        for model in models:
            variant = promoted[model.name]
            precision = variant.precision
            if precision in ("int8", "bf16"):
                # one at a time: dynamic INT8 scales per batch, and BF16 rounds a padded batch
                # differently from a text alone (both are gated alone vs in a batch)
                answers = [infer_json(url, model.name, [t]) for t in texts]
            else:  # concurrent: the batcher pads them together, float graphs must not care
                answers = list(pool.map(lambda t, m=model.name: infer_json(url, m, [t]), texts))
            assert all(status == 200 for status, _ in answers), model.name
            got = [logits_and_embedding(a) for _, a in answers]
            logits = np.concatenate([g[0] for g in got])
            embedding = np.concatenate([g[1] for g in got])
            if precision in LOGIT_LIMITS:  # the variant's own gate against PyTorch
                np.testing.assert_allclose(
                    logits, want, atol=LOGIT_LIMITS[precision], err_msg=model.name
                )
            else:
                # the INT8 gate on a text alone is the embedding's cosine (its argmax gate runs
                # on padded batches)
                worst = cosine(embedding, want_embedding).min()
                assert worst >= GATES.reduced_alone_vs_batch_min_cosine, (model.name, worst)
                assert worst >= GATES.reduced_min_embedding_cosine, (model.name, worst)
            # and serving adds nothing: each answer is what the loaded graph gives on that
            # text alone, called directly (no HTTP, JSON, queue or batch padding)
            graph = backend_runner(model.backends[0])
            alone = [graph(tokenizer.encode([t])) for t in texts]
            np.testing.assert_allclose(
                logits, np.concatenate([a[0] for a in alone]), atol=1e-4, err_msg=model.name
            )


def test_sigterm_under_load_on_a_minilm_model_of_the_quick_build_loses_no_accepted_request(
    quick_build, quick_trained
) -> None:
    # `serve` on one model folder of the repository (the others would only add loading time)
    name = next(v.name for v in quick_build.variants if v.promoted and v.precision == "fp32")
    texts = sample_texts(8, seed=12)
    tokenizer = TextTokenizer.from_checkpoint()
    eager = quick_trained.classifier("sdpa")
    flags = ["--max-queue-delay-us", "30000000", "--preferred-batch-size", "32"]
    flags += ["--max-batch-size", "32", "--threads", "1"]
    with server_process(quick_build.repository / name, *flags) as (url, process):
        drain = sigterm_under_load(
            url, process, name, texts, texts[:1], loaders=2, load_requests=50, timeout_s=120
        )
    assert drain.exit_code == 0
    for text, (status, answer) in zip(texts, drain.answers, strict=True):
        assert status == 200
        want, _ = torch_outputs(eager, tokenizer.encode([text]))
        got, _ = logits_and_embedding(answer)
        np.testing.assert_allclose(got, want, atol=GATES.fp32_max_abs_logit_diff)
    for result in drain.background:
        assert accepted_or_refused_at_the_door(result), result
    assert {"shutting down", "batchers drained"} <= set(drain.events)
