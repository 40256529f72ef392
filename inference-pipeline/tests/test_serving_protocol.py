"""The v2 protocol as a standard client sees it: tritonclient.http, health, metadata, errors,
the statistics extension. Every test runs against both front ends: the uvicorn server and
Ray Serve with 2 replicas (the session's ``serve --ray --replicas 2``: conftest's
``ray_serve``, which the Ray test stops).
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse

import numpy as np
import pytest
import tritonclient.http as triton
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    MAX_REQUEST_BYTES,
    TINY_MODEL,
    sample_texts,
    threaded_server,
    tiny_repository,
)


@pytest.fixture(scope="module", params=["uvicorn", "ray"])
def served(request):
    """(url, front end, the model loaded here as the reference) for each front end."""
    models = load_repository(tiny_repository())
    if request.param == "uvicorn":
        with threaded_server(models, max_request_bytes=MAX_REQUEST_BYTES) as (url, _):
            yield url, request.param, models[0]
    else:  # started with the same limit (MAX_REQUEST_BYTES)
        url, _ = request.getfixturevalue("ray_serve").running()
        yield url, request.param, models[0]


def raw_response(url: str, method: str, path: str, body: bytes | None = None, headers=None):
    """(status, headers, body bytes) of one HTTP request with the stdlib."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def raw_request(url: str, method: str, path: str, body: bytes | None = None, headers=None):
    """(status, parsed JSON or raw bytes) of one HTTP request with the stdlib."""
    status, _, data = raw_response(url, method, path, body, headers)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def direct_logits(model, texts: list[str]) -> np.ndarray:
    """Each text run alone through the model, no server: the reference."""
    rows = [model.run_batch(0, [model.prepare({"TEXT": np.array([t], dtype=object)}).data])[0]
            for t in texts]  # fmt: skip
    return np.concatenate([row["logits"] for row in rows])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_infers_labels_and_logits(served, binary):
    url, _, model = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(TINY_MODEL)
    metadata = client.get_model_metadata(TINY_MODEL)
    assert metadata["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    assert {o["name"]: o["shape"] for o in metadata["outputs"]}["logits"] == [-1, 5]
    texts = sample_texts(3, seed=1)
    text_input = triton.InferInput("TEXT", [len(texts)], "BYTES")
    text_input.set_data_from_numpy(np.array(texts, dtype=object), binary_data=binary)
    outputs = [
        triton.InferRequestedOutput("logits", binary_data=binary),
        triton.InferRequestedOutput("label", binary_data=binary),
    ]
    result = client.infer(TINY_MODEL, [text_input], outputs=outputs, request_id="r1")
    logits = result.as_numpy("logits")
    assert logits.dtype == np.float32 and logits.shape == (3, 5)
    np.testing.assert_allclose(logits, direct_logits(model, texts), atol=1e-4)
    labels = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("label")]
    assert labels == [model.labels[i] for i in logits.argmax(1)]
    assert result.get_response()["id"] == "r1"
    client.close()


def test_tritonclient_default_outputs_come_back_binary(served):
    url, _, _ = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    text_input = triton.InferInput("TEXT", [1], "BYTES")
    text_input.set_data_from_numpy(np.array(["film star award"], dtype=object))
    result = client.infer(TINY_MODEL, [text_input])  # no outputs named: all, binary
    assert result.as_numpy("embedding").shape == (1, 384)
    assert result.as_numpy("label").shape == (1,)
    client.close()


def test_unknown_model_is_404_everywhere(served):
    url, _, _ = served
    for method, path in [
        ("GET", "/v2/models/nope"),
        ("GET", "/v2/models/nope/ready"),
        ("POST", "/v2/models/nope/infer"),
        ("GET", f"/v2/models/{TINY_MODEL}/versions/7"),
    ]:
        status, body = raw_request(url, method, path, b"{}" if method == "POST" else None)
        assert status == 404 and set(body) == {"error"}, (path, body)
        assert "unknown model" in body["error"]


def request_body(**fields) -> bytes:
    """A valid one-text request with top-level ``fields`` replaced."""
    text = {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["market"]}
    return json.dumps({"inputs": [text]} | fields).encode()


def infer_body(**tensor) -> bytes:
    entry = {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["market"]} | tensor
    return json.dumps({"inputs": [entry]}).encode()


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"inputs": [', 400, "malformed JSON"),
        (b"[]", 400, "inputs"),
        (infer_body(datatype="FP32"), 400, "datatype"),
        (infer_body(shape=[1, 1]), 400, "shape"),
        (infer_body(shape=[2]), 400, "elements"),
        (infer_body(shape=[0], data=[]), 400, "empty batch"),
        (infer_body(name="IDS"), 400, "unknown input"),
        (infer_body(data=[7]), 400, "strings"),
        (infer_body(shape=[9], data=["a"] * 9), 400, "rows"),
        (b"x" * (10 * 1024 * 1024), 413, "exceeds"),
        (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
        (infer_body(data="market"), 400, "must be a list"),
        (infer_body(shape=[1, 2**62], data=["a"]), 400, "shape"),
        (infer_body(shape=[2**63], data=["a"]), 400, "elements"),
        (infer_body(shape=[True]), 400, "shape"),
        (infer_body(parameters=[1]), 400, "'parameters' must be an object"),
        (request_body(parameters="x"), 400, "parameters"),
        (request_body(outputs=[{"name": "a", "parameters": 3}]), 400, "parameters"),
        (request_body(outputs={"name": "a"}), 400, "'outputs' must be a list"),
        (request_body(parameters={"priority": "high"}), 400, "priority"),
        (request_body(parameters={"timeout": -5}), 400, "timeout"),
        (b"\xff\xfe{}", 400, "malformed JSON"),
    ],
    ids=[
        "json",
        "not-object",
        "dtype",
        "rank",
        "count",
        "empty",
        "name",
        "bytes",
        "rows",
        "10MB",
        "deep-json",
        "data-not-list",
        "huge-dim",
        "huge-batch",
        "bool-dim",
        "params-list",
        "request-params",
        "output-params",
        "outputs-not-list",
        "priority-type",
        "negative-timeout",
        "not-utf8",
    ],
)
def test_bad_requests_get_status_and_one_message(served, body, status, words):
    url, _, _ = served
    got, answer = raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", body)
    assert got == status
    assert set(answer) == {"error"} and words in answer["error"]
    assert "\n" not in answer["error"]


def test_metrics_show_requests_and_average_batch(served):
    url, _, _ = served
    assert raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", infer_body())[0] == 200
    assert raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", b"[]")[0] == 400
    _, text = raw_request(url, "GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else json.dumps(text)
    for name in (
        "inference_requests_total",
        "inference_count_total",
        "inference_exec_count_total",
        "inference_queue_seconds_bucket",
        "inference_compute_seconds_bucket",
    ):
        assert name in text
    assert f'inference_requests_total{{model="{TINY_MODEL}",status="success"}}' in text
    assert 'status="bad_request"' in text


def test_tritonclient_priority_and_timeout_reach_the_batcher(served):
    url, _, _ = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    text_input = triton.InferInput("TEXT", [1], "BYTES")
    text_input.set_data_from_numpy(np.array(["market"], dtype=object))
    assert client.infer(TINY_MODEL, [text_input], priority=1).as_numpy("label").shape == (1,)
    with pytest.raises(triton.InferenceServerException, match="priority 5 outside 1..2"):
        client.infer(TINY_MODEL, [text_input], priority=5)
    with pytest.raises(triton.InferenceServerException, match="timed out") as timed_out:
        client.infer(TINY_MODEL, [text_input], timeout=1)  # 1 microsecond in the queue
    assert timed_out.value.status() == "504"
    client.close()


def deep_list(depth: int) -> object:
    value: object = ["market"]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("headers", "body", "words"),
    [
        ({}, infer_body(data=deep_list(200)), "nested deeper"),
        ({"Inference-Header-Content-Length": "abc"}, infer_body(), "not an integer"),
        ({"Inference-Header-Content-Length": "999999"}, infer_body(), "outside the body"),
        ({"Inference-Header-Content-Length": "-1"}, infer_body(), "outside the body"),
    ],
    ids=["deep-data", "header-not-int", "header-too-big", "header-negative"],
)
def test_malformed_bodies_and_headers_are_4xx(served, headers, body, words):
    url, _, _ = served
    status, answer = raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", body, headers)
    assert status == 400 and words in answer["error"], answer


def binary_body(payload: bytes, size: int, datatype: str = "BYTES", shape=(1,)) -> tuple:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "datatype": datatype,
                    "shape": list(shape),
                    "parameters": {"binary_data_size": size},
                }
            ]
        }
    ).encode()
    return header + payload, {"Inference-Header-Content-Length": str(len(header))}


@pytest.mark.parametrize(
    ("payload", "size", "words"),
    [
        (b"\x05\x00\x00\x00ab", 6, "truncated BYTES"),
        (b"\x01\x00", 2, "truncated BYTES"),
        (b"\x01\x00\x00\x00a", 500, "beyond the request body"),
        (b"\x01\x00\x00\x00a\x01\x00\x00\x00b", 10, "elements do not fill"),
        (b"\x02\x00\x00\x00\xff\xfe", 6, "utf-8"),
    ],
    ids=["length-past-end", "short-prefix", "size-past-body", "two-for-one", "not-utf8"],
)
def test_malformed_binary_tensors_are_400(served, payload, size, words):
    url, _, _ = served
    body, headers = binary_body(payload, size)
    status, answer = raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", body, headers)
    assert status == 400 and words in answer["error"], answer
    assert "\n" not in answer["error"]


def test_content_types_follow_the_encoding(served):
    url, _, _ = served
    text_body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                        "data": ["market"]}]})  # fmt: skip
    status, headers, data = raw_response(url, "POST", f"/v2/models/{TINY_MODEL}/infer",
                                         text_body.encode())  # fmt: skip
    assert status == 200 and headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in headers
    assert json.loads(data)["model_name"] == TINY_MODEL
    binary = json.loads(text_body) | {"parameters": {"binary_data_output": True}}
    status, headers, data = raw_response(url, "POST", f"/v2/models/{TINY_MODEL}/infer",
                                         json.dumps(binary).encode())  # fmt: skip
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    header_length = int(headers["inference-header-content-length"])
    document = json.loads(data[:header_length])
    sizes = [o["parameters"]["binary_data_size"] for o in document["outputs"]]
    assert header_length + sum(sizes) == len(data)


def test_server_metadata_versions_routes_and_extensions(served):
    url, _, _ = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    metadata = client.get_server_metadata()
    assert {"binary_tensor_data", "statistics"} <= set(metadata["extensions"])
    assert client.get_model_metadata(TINY_MODEL, model_version="1")["versions"] == ["1"]
    assert client.is_model_ready(TINY_MODEL, model_version="1")
    text_input = triton.InferInput("TEXT", [1], "BYTES")
    text_input.set_data_from_numpy(np.array(["market"], dtype=object))
    result = client.infer(TINY_MODEL, [text_input], model_version="1")
    assert result.get_response()["model_version"] == "1"
    config = client.get_model_config(TINY_MODEL, model_version="1")
    assert config["max_batch_size"] == 8
    with pytest.raises(triton.InferenceServerException, match="version 7"):
        client.get_inference_statistics(TINY_MODEL, model_version="7")
    client.close()


def metric_values(url: str, name: str) -> dict[str, float]:
    """{label text: value} of one metric family in /metrics."""
    _, _, data = raw_response(url, "GET", "/metrics")
    found = re.findall(rf"^{name}\{{([^}}]*)\}} ([0-9.e+]+)$", data.decode(), re.MULTILINE)
    return {labels: float(value) for labels, value in found}


def stable_statistics(client) -> dict:
    """The model's statistics once two reads 0.6 s apart agree: every Ray replica reports
    changed counters within ``ray_deployment.PUSH_INTERVAL_S`` (0.25 s), so by then each has
    reported the requests of the tests before."""
    (last,) = client.get_inference_statistics(TINY_MODEL)["model_stats"]
    for _ in range(30):
        time.sleep(0.6)
        (stats,) = client.get_inference_statistics(TINY_MODEL)["model_stats"]
        if stats == last:
            return stats
        last = stats
    return last


def settled_statistics(client, rows: int, fails: int) -> dict:
    """The model's statistics once they count ``rows`` rows and ``fails`` failed requests
    (Ray's replicas report their counters to the collector shortly after each change)."""
    for _ in range(400):
        (stats,) = client.get_inference_statistics(TINY_MODEL)["model_stats"]
        failed = stats["inference_stats"]["fail"]["count"]
        if stats["inference_count"] >= rows and failed >= fails:
            return stats
        time.sleep(0.05)
    return stats


def test_statistics_extension_counts_requests_and_batches_like_metrics(served):
    url, front_end, _ = served
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    before = stable_statistics(client)
    rows = [1, 2, 3, 1, 2]  # one request after the other: each runs as its own batch
    for count in rows:
        text_input = triton.InferInput("TEXT", [count], "BYTES")
        text_input.set_data_from_numpy(np.array(sample_texts(count, seed=count), dtype=object))
        client.infer(TINY_MODEL, [text_input])
    status, _ = raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", infer_body(name="X"))
    assert status == 400
    expected_fails = before["inference_stats"]["fail"]["count"] + 1
    after = settled_statistics(client, before["inference_count"] + sum(rows), expected_fails)
    assert after["name"] == TINY_MODEL and after["version"] == "1"
    assert after["inference_count"] - before["inference_count"] == sum(rows)
    assert after["execution_count"] - before["execution_count"] == len(rows)
    stats, old = after["inference_stats"], before["inference_stats"]
    assert stats["success"]["count"] - old["success"]["count"] == len(rows)
    assert stats["fail"]["count"] - old["fail"]["count"] == 1
    assert stats["queue"]["count"] - old["queue"]["count"] == len(rows)
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert stats[phase]["count"] - old[phase]["count"] == len(rows)
        assert stats[phase]["ns"] > old[phase]["ns"]
    assert stats["success"]["ns"] > old["success"]["ns"]

    def per_size(entry):
        return {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}

    grown = {size: n - per_size(before).get(size, 0) for size, n in per_size(after).items()}
    assert {size: n for size, n in grown.items() if n} == {1: 2, 2: 2, 3: 1}
    assert after["last_inference"] > 0  # ms since the epoch
    # the same numbers in /metrics and under every statistics route
    label = f'model="{TINY_MODEL}"'
    assert metric_values(url, "inference_count_total")[label] == after["inference_count"]
    assert metric_values(url, "inference_exec_count_total")[label] == after["execution_count"]
    requests = metric_values(url, "inference_requests_total")
    assert requests[f'{label},status="success"'] == stats["success"]["count"]
    refused = sum(v for k, v in requests.items() if k.startswith(label) and "success" not in k)
    assert refused == stats["fail"]["count"]
    everything = client.get_inference_statistics()["model_stats"]
    versioned = client.get_inference_statistics(TINY_MODEL, model_version="1")["model_stats"]
    for listed in (everything, versioned):
        (same,) = [m for m in listed if m["name"] == TINY_MODEL]
        assert same["inference_count"] == after["inference_count"], front_end
    client.close()
