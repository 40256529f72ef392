"""The v2 protocol as a standard client sees it: tritonclient.http, health, metadata, errors."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import numpy as np
import pytest
import tritonclient.http as triton
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_MODEL,
    sample_texts,
    threaded_server,
    tiny_repository,
)


@pytest.fixture(scope="module")
def served():
    models = load_repository(tiny_repository())
    with threaded_server(models, max_request_bytes=1024 * 1024) as (url, server):
        yield url, server, models[0]


def raw_request(url: str, method: str, path: str, body: bytes | None = None, headers=None):
    """(status, parsed JSON or raw bytes) of one HTTP request with the stdlib."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


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
    ],
    ids=["json", "not-object", "dtype", "rank", "count", "empty", "name", "bytes", "rows", "10MB"],
)
def test_bad_requests_get_status_and_one_message(served, body, status, words):
    url, _, _ = served
    got, answer = raw_request(url, "POST", f"/v2/models/{TINY_MODEL}/infer", body)
    assert got == status
    assert set(answer) == {"error"} and words in answer["error"]
    assert "\n" not in answer["error"]


def test_metrics_show_requests_and_average_batch(served):
    url, _, _ = served
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
