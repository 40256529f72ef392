"""OpenVINO as a second runtime: FP32, BF16 and INT8 QDQ on the same .onnx files, checked
against PyTorch (the gates' reference) and ONNX Runtime; its registry entry and folders."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from inference_pipeline import pipeline, quantize
from inference_pipeline.gates import (
    BF16_GATES,
    FP32_GATES,
    GATES,
    GateReport,
    GateResult,
    apply_gates,
    evaluate,
    min_cosine,
)
from inference_pipeline.openvino_runtime import (
    COMPILE_CACHE_ENV,
    PIN_IN_SERVER,
    PIN_WHEN_ALONE,
    StaticShapeModel,
    _prune,
    bf16_unsupported_reason,
    compile_cache_dir,
    compile_model,
    compile_settings,
    cpu_flags,
    padded_shape,
    threading_settings,
)
from inference_pipeline.repository import load_model_folder, write_model_folder
from inference_pipeline.runtime import backend_runner, make_session, session_runner
from inference_pipeline.serving.backends import (
    BackendError,
    OpenVinoBackend,
    backend_spec,
    make_backend,
)
from inference_pipeline.serving.models import load_model
from inference_pipeline_harness.scenarios import quick_artifacts, quick_graph

NO_BF16 = bf16_unsupported_reason()
needs_bf16 = pytest.mark.skipif(NO_BF16 is not None, reason=NO_BF16 or "")


@pytest.fixture(scope="module")
def art():
    return quick_artifacts()


def _evaluate(art, runner):
    return evaluate(runner, art.tokenizer, art.gate_set)


def _openvino(path, hint: str | None):
    parameters = {} if hint is None else {"INFERENCE_PRECISION_HINT": hint}
    return OpenVinoBackend(path, 1, parameters)


def _values(report) -> dict[str, float]:
    return {r.name: r.value for r in report.results}


def test_bf16_capability_is_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni\n")
    flags = cpu_flags(cpuinfo)
    assert "avx512_vnni" in flags and "avx512_bf16" not in flags
    reason = bf16_unsupported_reason(flags)
    assert reason is not None and "avx512_bf16" in reason and "\n" not in reason
    assert bf16_unsupported_reason(flags | {"amx_bf16"}) is None
    assert cpu_flags(tmp_path / "missing") == set()


def test_compile_settings_mirror_ort_threads_and_reject_unknown_precisions():
    settings = compile_settings(3, "bf16")
    assert settings["INFERENCE_NUM_THREADS"] == 3 and settings["NUM_STREAMS"] == 1
    assert settings["INFERENCE_PRECISION_HINT"] == "bf16"
    assert "INFERENCE_PRECISION_HINT" not in compile_settings(3, None)  # OpenVINO picks
    with pytest.raises(ValueError, match="int4"):
        compile_settings(1, "int4")


def test_our_rows_and_the_peer_compile_with_the_same_threading_knobs(art):
    """The bench's peer (OpenVINO's own defaults, only the thread and stream counts set) and
    our rows timed alone, dynamic or static shapes, report the same value of every threading
    knob, read back from the compiled models; a served model differs in pinning alone."""
    import openvino as ov

    path = art.exports["torchscript"]
    core = ov.Core()
    peer = core.compile_model(
        core.read_model(str(path)), "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1}
    )
    alone = {"pinning": PIN_WHEN_ALONE}
    dynamic = make_backend("openvino", path, 1, {"INFERENCE_PRECISION_HINT": "f32"}, alone)
    static = make_backend(
        "openvino", path, 1, {"INFERENCE_PRECISION_HINT": "f32", "STATIC_SHAPES": "true"}, alone
    )
    static.run(art.tokenizer.encode(art.gate_set.texts[:2]))
    static_compiled = next(iter(static.static.requests.values())).get_compiled_model()
    served = make_backend("openvino", path, 1, {"INFERENCE_PRECISION_HINT": "f32"})
    for knob in threading_settings(1):
        want = peer.get_property(knob)
        assert dynamic.compiled.get_property(knob) == want, knob
        assert static_compiled.get_property(knob) == want, knob
        if knob != "ENABLE_CPU_PINNING":
            assert served.compiled.get_property(knob) == want, knob
    assert served.compiled.get_property("ENABLE_CPU_PINNING") is False


def test_openvino_fp32_passes_the_fp32_gates_against_torch(art):
    path = art.exports["torchscript"]
    candidate = _evaluate(art, backend_runner(_openvino(path, "f32")))
    report = apply_gates("ov_fp32", FP32_GATES, candidate, art.reference, art.gate_set)
    assert report.passed, [r.describe() for r in report.failed]
    ort_out = _evaluate(art, session_runner(make_session(path, 1)))
    assert np.max(np.abs(candidate.batched[0] - ort_out.batched[0])) <= 1e-4


@needs_bf16
def test_openvino_bf16_is_really_bf16_and_passes_the_bf16_gates(art):
    path = art.exports["torchscript"]
    candidate = _evaluate(art, backend_runner(_openvino(path, "bf16")))
    report = apply_gates("ov_bf16", BF16_GATES, candidate, art.reference, art.gate_set)
    assert report.passed, [r.describe() for r in report.failed]
    # Not FP32 in disguise: the logits move by more than the FP32 gate allows.
    fp32_report = apply_gates("ov_bf16", FP32_GATES, candidate, art.reference, art.gate_set)
    assert _values(fp32_report)["max_abs_logit_diff_vs_torch"] > 1e-4
    assert "max_abs_logit_diff_vs_torch" in {r.name for r in fp32_report.failed}


@needs_bf16
def test_openvino_default_on_a_bf16_cpu_is_bf16(art):
    """Why every OpenVINO folder names its precision: left alone, OpenVINO computes our FP32
    export in BF16 on this CPU (the bench's peer is exactly that)."""
    path = art.exports["torchscript"]
    feeds = art.tokenizer.encode(art.gate_set.texts[:4])
    default = _openvino(path, None).run(feeds)["logits"]
    bf16 = _openvino(path, "bf16").run(feeds)["logits"]
    f32 = _openvino(path, "f32").run(feeds)["logits"]
    np.testing.assert_array_equal(default, bf16)
    assert np.max(np.abs(default - f32)) > 0


def test_symmetric_weight_only_qdq_runs_as_the_same_graph_on_both_runtimes(art):
    dst = quick_graph("ov_int8_static_sym")  # the recipe's graph, as the quick build made it
    model = onnx.load(str(dst))
    zero_points = {i.name: i for i in model.graph.initializer}
    quantized_inputs = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert quantized_inputs
    for node in quantized_inputs:  # symmetric INT8 activations: zero point 0, int8
        zero = onnx.numpy_helper.to_array(zero_points[node.input[2]])
        assert zero.dtype == np.int8 and not zero.any()
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    int8_matmuls = [n for n in matmuls if n.input[1] in dequantized]
    # 36 weight MatMuls less the 6 FFN outputs; attention's 12 stay float
    assert len(int8_matmuls) == 30 and len(matmuls) == 48
    # The same QDQ graph, float ops in FP32 on both runtimes, agrees within the INT8 gate's
    # cosine (their integer kernels round differently: measured 0.989 apart on the quick
    # model). With float ops in BF16 as the recipe runs it, the build's INT8 gates decide
    # (full build: cosine 0.983 vs PyTorch); the quick model is too weakly trained for that.
    ort_out = _evaluate(art, session_runner(make_session(dst, 1)))
    ov_out = _evaluate(art, backend_runner(_openvino(dst, "f32")))
    assert min_cosine(ov_out.batched[1], ort_out.batched[1]) >= GATES.reduced_min_embedding_cosine


def _graph_nodes(path):
    model = onnx.load(str(path))
    weights = {i.name for i in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    return model.graph.node, weights, producer


def _int8_matmuls(path) -> set[str]:
    """MatMul/Gemm nodes whose two inputs both come out of a DequantizeLinear (through the
    Reshape/Transpose that make attention's heads)."""
    nodes, _, producer = _graph_nodes(path)

    def dequantized(name: str) -> bool:
        while name in producer and producer[name].op_type in ("Reshape", "Transpose"):
            name = producer[name].input[0]
        return name in producer and producer[name].op_type == "DequantizeLinear"

    return {
        n.name
        for n in nodes
        if n.op_type in ("MatMul", "Gemm") and dequantized(n.input[0]) and dequantized(n.input[1])
    }


def test_nncf_recipe_quantizes_every_weight_matmul_and_leaves_attention_float(art):
    # the recipe's graph from the quick build, made from the same export
    src, dst = art.exports["torchscript"], quick_graph("ov_int8_nncf")
    nodes, weights, _ = _graph_nodes(src)
    with_weights = {
        n.name for n in nodes if n.op_type in ("MatMul", "Gemm") and set(n.input) & weights
    }
    assert len(with_weights) == 38  # 36 encoder MatMuls, the pooler's and the head's Gemm
    int8 = _int8_matmuls(dst)
    assert int8 == with_weights
    assert set(quantize.ffn_output_matmuls(src)) <= int8  # the FFN outputs are INT8 here
    assert not int8 & set(quantize.attention_matmuls(src))
    # SmoothQuant's per-channel multiplies sit before the quantizers: more Mul nodes
    count = lambda path: sum(n.op_type == "Mul" for n in _graph_nodes(path)[0])  # noqa: E731
    assert count(dst) > count(src)
    # The INT8 graph with float ops in FP32 stays within the INT8 gate's cosine of PyTorch.
    ov_out = _evaluate(art, backend_runner(_openvino(dst, "f32")))
    assert (
        min_cosine(ov_out.batched[1], art.reference.batched[1])
        >= GATES.reduced_min_embedding_cosine
    )


def test_nncf_attention_recipe_also_quantizes_q_times_k(art):
    # quantized here: its gates refuse it on the quick model, so the build keeps no graph of it
    from phase01_common.bbc_news import load_bbc_news

    src, dst = art.exports["torchscript"], art.folder / "ov_int8_nncf_attention.onnx"
    row = quantize.recipe("ov_int8_nncf_attention")
    quantize.METHODS[row.method](row, src, dst, art.tokenizer, load_bbc_news().train_texts[:8])
    attention = set(quantize.attention_matmuls(src))
    assert len(attention) == 12
    assert len(_int8_matmuls(dst) & attention) == 6  # Q x K^T of each layer; probs x V float


def test_static_shapes_pad_batch_to_a_power_of_two_and_sequence_to_a_bucket():
    assert padded_shape(1, 3) == (1, 32)
    assert padded_shape(5, 33) == (8, 64)
    assert padded_shape(8, 128) == (8, 128)
    assert padded_shape(3, 256) == (4, 256)
    with pytest.raises(ValueError, match="at least 1"):
        padded_shape(0, 5)


def test_static_shape_model_equals_the_dynamic_one_and_compiles_once_per_shape(art):
    path = art.exports["torchscript"]
    dynamic = _openvino(path, "f32")
    static = OpenVinoBackend(path, 1, {"INFERENCE_PRECISION_HINT": "f32", "STATIC_SHAPES": "true"})
    texts = art.gate_set.texts
    shapes = set()
    for batch in (texts[:5], texts[5:6], texts[6:9], texts[:5]):
        feeds = art.tokenizer.encode(batch)
        shapes.add(padded_shape(*feeds["input_ids"].shape))
        expected, got = dynamic.run(feeds), static.run(feeds)
        for name in expected:
            assert got[name].shape == expected[name].shape
            assert np.max(np.abs(got[name] - expected[name])) <= 1e-5, name
    assert static.static.compiles == len(shapes) == len(static.static.requests)
    # The least recently used shape is dropped beyond max_shapes, and compiled again later.
    small = StaticShapeModel(path, 1, "f32", max_shapes=1)
    for batch in (texts[:1], texts[:2], texts[:1]):
        small.run(art.tokenizer.encode(batch))
    assert small.compiles == 3 and len(small.requests) == 1
    with pytest.raises(BackendError, match="STATIC_SHAPES 'yes'"):
        OpenVinoBackend(path, 1, {"STATIC_SHAPES": "yes"})


def _outputs(compiled, feeds) -> list[np.ndarray]:
    request = compiled.create_infer_request()
    request.infer(feeds)
    return [np.array(request.get_output_tensor(i).data, copy=True) for i in range(2)]


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def test_compile_cache_imports_the_same_model_bit_for_bit_with_the_callers_settings(
    art, tmp_path, monkeypatch
):
    """A compile writes one blob under <cache root>/openvino and the next compile of that
    model imports it (OpenVINO's LOADED_FROM_CACHE): the same outputs bit for bit as without
    the cache, and the threading knobs and precision hint of the second call, not the first
    (the CPU blob holds neither). A damaged blob is compiled again, not trusted."""
    monkeypatch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path))
    path = art.exports["torchscript"]
    feeds = art.tokenizer.encode(art.gate_set.texts[:4])
    hints = ["f32"] if NO_BF16 else ["f32", "bf16"]
    monkeypatch.setenv(COMPILE_CACHE_ENV, "off")
    assert compile_cache_dir() is None
    uncached = {hint: compile_model(path, 1, hint) for hint in hints}
    assert not any(c.get_property("LOADED_FROM_CACHE") for c in uncached.values())
    want = {hint: _outputs(c, feeds) for hint, c in uncached.items()}
    assert not (tmp_path / "openvino").exists()
    monkeypatch.setenv(COMPILE_CACHE_ENV, "on")
    folder = compile_cache_dir()
    assert folder == tmp_path / "openvino"
    first = compile_model(path, 1, "f32")
    assert not first.get_property("LOADED_FROM_CACHE")
    blobs = list(folder.glob("*.blob"))
    assert len(blobs) == 1 and blobs[0].stat().st_size > path.stat().st_size // 2
    assert _same(_outputs(first, feeds), want["f32"])
    for hint in hints:  # the f32 compile's blob serves every hint
        again = compile_model(path, 2, hint, pinning=PIN_IN_SERVER)
        assert again.get_property("LOADED_FROM_CACHE"), hint
        assert again.get_property("INFERENCE_NUM_THREADS") == 2
        assert again.get_property("ENABLE_CPU_PINNING") is False
        precision = "INFERENCE_PRECISION_HINT"
        assert again.get_property(precision) == uncached[hint].get_property(precision), hint
        assert _same(_outputs(again, feeds), want[hint]), hint
    if not NO_BF16:  # the BF16 import really computes in BF16
        assert not _same(want["bf16"], want["f32"])
    assert list(folder.glob("*.blob")) == blobs
    # A static shape is another model: its own blob, imported by a second StaticShapeModel.
    shape = padded_shape(*feeds["input_ids"].shape)
    static = [StaticShapeModel(path, 1, "f32") for _ in range(2)]
    runs = [model.run(feeds) for model in static]
    compiled = [model.requests[shape].get_compiled_model() for model in static]
    loaded = [c.get_property("LOADED_FROM_CACHE") for c in compiled]
    assert loaded == [False, True] and [m.compiles for m in static] == [1, 1]
    assert all(np.array_equal(runs[0][name], runs[1][name]) for name in runs[0])
    assert len(list(folder.glob("*.blob"))) == 2
    # A truncated blob (a killed writer's) fails to import: OpenVINO compiles and rewrites it.
    blob = blobs[0]
    size = blob.stat().st_size
    blob.chmod(0o600)
    with open(blob, "r+b") as handle:
        handle.truncate(size // 2)
    rebuilt = compile_model(path, 1, "f32")
    assert not rebuilt.get_property("LOADED_FROM_CACHE")
    assert _same(_outputs(rebuilt, feeds), want["f32"]) and blob.stat().st_size == size


def test_compile_cache_switch_and_size_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path))
    monkeypatch.setenv(COMPILE_CACHE_ENV, "maybe")
    with pytest.raises(ValueError, match="expected on or off") as error:
        compile_cache_dir()
    assert "\n" not in str(error.value)
    monkeypatch.delenv(COMPILE_CACHE_ENV)
    folder = compile_cache_dir()
    assert folder == tmp_path / "openvino" and folder.is_dir()
    for age, name in enumerate(("old", "mid", "new")):  # 100 bytes each, written in this order
        (folder / f"{name}.blob").write_bytes(b"x" * 100)
        os.utime(folder / f"{name}.blob", (1000 + age, 1000 + age))
    (folder / "model-1.lock").write_bytes(b"x" * 500)  # not a blob: never counted or deleted
    _prune(folder, max_bytes=250)
    assert sorted(p.name for p in folder.iterdir()) == ["mid.blob", "model-1.lock", "new.blob"]
    _prune(folder, max_bytes=200)
    assert len(list(folder.glob("*.blob"))) == 2


def test_openvino_folder_is_written_validated_and_served(art, tmp_path):
    path = art.exports["torchscript"]
    folder = write_model_folder(
        tmp_path, "m_ov", path, art.tokenizer, art.trained.label_names, "openvino",
        {"INFERENCE_PRECISION_HINT": "f32"},
    )  # fmt: skip
    loaded = load_model_folder(folder)
    assert loaded.config.backend == "openvino" and not loaded.config.platform
    assert loaded.config.default_model_filename == "model.onnx"
    assert loaded.config.parameters["INFERENCE_PRECISION_HINT"].string_value == "f32"
    served = load_model(folder, threads=1)
    assert served.config.platform == backend_spec("openvino").platform == "openvino"
    assert all(isinstance(b, OpenVinoBackend) for b in served.backends)
    feeds = art.tokenizer.encode(art.gate_set.texts[:3])
    logits = served.backends[0].run(feeds)["logits"]
    torch_logits = art.reference.batched[0][:3]
    assert np.max(np.abs(logits - torch_logits)) <= 1e-4


def test_unreadable_model_and_unknown_hint_are_one_line_errors(art, tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(BackendError) as error:
        OpenVinoBackend(bad, 1, {"INFERENCE_PRECISION_HINT": "f32"})
    assert str(bad) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(BackendError, match="int4"):
        OpenVinoBackend(art.exports["torchscript"], 1, {"INFERENCE_PRECISION_HINT": "int4"})


def test_promotion_marks_the_fastest_median_per_batch(monkeypatch, tmp_path):
    names = ("fp32", "int8_dynamic", "ov_bf16", "fp16", "ov_bf16_static")
    rows = {name: quantize.recipe(name) for name in names}
    variants = [pipeline.Variant(f"m_{n}", r, n, tmp_path / f"{n}.onnx") for n, r in rows.items()]
    for variant in variants:
        variant.gates = GateReport(variant.name, [_passing()])
    variants[1].gates = GateReport("m_int8_dynamic", [_passing(False)])  # refused
    # median ms by batch: ov_bf16 wins batch 1, the static-shape row batch 8 and fp32 is the
    # fastest dynamic-shape one there (the served default); fp16 is never timed
    medians = {
        1: {"m_fp32": 5.0, "m_ov_bf16": 2.0, "m_ov_bf16_static": 3.0},
        8: {"m_fp32": 10.0, "m_ov_bf16": 30.0, "m_ov_bf16_static": 8.0},
    }
    seen = []

    def fake_interleaved(runners, inputs, rounds):
        batch = len(inputs["input_ids"])
        seen.append((batch, sorted(runners), inputs["input_ids"].shape[1]))
        return {name: np.array([medians[batch][name]] * 3) for name in runners}

    monkeypatch.setattr(pipeline, "variant_runner", lambda *args: None)
    monkeypatch.setattr(pipeline, "interleaved_ms", fake_interleaved)
    record = pipeline.promote_fastest(variants, quick_artifacts().tokenizer, rounds=4)
    timed = ["m_fp32", "m_ov_bf16", "m_ov_bf16_static"]
    assert seen == [(1, timed, 128), (8, timed, 128)]
    assert record["by_batch"]["1"]["variant"] == "m_ov_bf16"
    assert record["by_batch"]["8"] == {"variant": "m_ov_bf16_static", "p50_ms": 8.0, "rounds": 3}
    assert record["served"] == "m_fp32" and record["threads"] == 1
    assert variants[2].latency_ms == {"batch1_p50": 2.0, "batch8_p50": 30.0}
    assert variants[1].latency_ms == {} and variants[3].latency_ms == {}


def _passing(ok: bool = True) -> GateResult:
    return GateResult("non_finite_values", 0.0 if ok else 1.0, 0.0, "<=", ok)


def test_rows_needing_bf16_are_skipped_with_the_reason_on_a_cpu_without_it(monkeypatch):
    needs = [row for row in quantize.primary_recipes() if row.needs == "bf16"]
    assert {row.name for row in needs} >= {"ov_bf16", "ov_int8_static_sym"}
    reason = bf16_unsupported_reason({"avx512f"})
    monkeypatch.setattr(pipeline, "bf16_unsupported_reason", lambda: reason)
    assert all(pipeline.missing_capability(row) == reason for row in needs)
    assert pipeline.missing_capability(quantize.recipe("ov_fp32")) is None
    assert pipeline.missing_capability(quantize.recipe("int8_dynamic")) is None


def test_profile_categories_name_the_kernel_precision_and_attention():
    from inference_pipeline_harness.openvino_profile import node_category, node_label

    attention = "/bert/encoder/layer.2/attention/self/MatMul_1"
    assert node_category("Subgraph", "jit_avx512_bf16", attention) == "Subgraph (attention) bf16"
    residual = "/bert/encoder/layer.2/attention/output/Add"
    assert node_category("Subgraph", "jit_avx512_f32", residual) == "Subgraph f32"
    fc = "/bert/encoder/layer.2/output/dense/MatMul/DequantizationMultiply"
    assert node_category("FullyConnectedQuantizedLegacy", "brgemm_avx512_amx_i8", fc) == (
        "FullyConnected i8"
    )
    assert node_category("Transpose", "unknown_bf16", "t") == "Transpose bf16"
    assert node_label(fc) == "output/dense"


@needs_bf16
def test_profile_times_the_promoted_default_of_each_batch_against_the_peer():
    from inference_pipeline.repository import read_manifest
    from inference_pipeline_harness.openvino_profile import profile_table
    from inference_pipeline_harness.scenarios import quick_build

    repo = quick_build().repository
    by_batch = read_manifest(repo)["default_variant"]["by_batch"]
    lines = profile_table(repo, rounds=1, progress=lambda _: None).splitlines()
    named = f"promoted = b1 {by_batch['1']['variant']}, b8 {by_batch['8']['variant']};"
    assert lines[0].startswith(named)
    # columns: default b1, promoted b1, default b8, promoted b8. The quick build's promoted
    # default is an INT8 OpenVINO row: its weight MatMuls run INT8 kernels, the peer's BF16.
    table = lines[2 : next(i for i, line in enumerate(lines) if line.startswith("one encoder"))]
    rows = {line[:34].strip(): [float(v) for v in line[34:].split()] for line in table}
    int8, bf16 = rows["FullyConnected i8"], rows["FullyConnected bf16"]
    assert int8[0] == int8[2] == 0.0 and int8[1] > 0.0 and int8[3] > 0.0
    assert bf16[0] > 0.0 and bf16[2] > 0.0 and bf16[1] == bf16[3] == 0.0
