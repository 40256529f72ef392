"""Reliability under concurrency, overload, disconnects and SIGTERM (real servers, loopback)."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_MODEL,
    SlowModel,
    infer_json,
    sample_texts,
    server_process,
    threaded_server,
    tiny_repository,
)


def alone(model, text: str) -> np.ndarray:
    prepared = model.prepare({"TEXT": np.array([text], dtype=object)})
    return model.run_batch(0, [prepared.data])[0]["logits"][0]


def logits_of(answer: dict) -> np.ndarray:
    tensor = next(o for o in answer["outputs"] if o["name"] == "logits")
    return np.array(tensor["data"], dtype=np.float32).reshape(tensor["shape"])


def metric(url: str, pattern: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(pattern + r" ([0-9.e+-]+)", text)
    return float(found.group(1)) if found else 0.0


def test_concurrent_mixed_length_clients_match_running_alone():
    (model,) = load_repository(tiny_repository(), {"max_queue_delay_us": 3000})
    texts = sample_texts(96, seed=3)
    with threaded_server([model]) as (url, _):
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda t: infer_json(url, TINY_MODEL, [t]), texts))
        batches = metric(url, r'inference_exec_count_total\{model="tiny_text"\}')
    assert all(status == 200 for status, _ in answers)
    for text, (_, answer) in zip(texts, answers, strict=True):
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)
    assert batches < len(texts)  # requests really were batched together


def test_burst_beyond_queue_limit_gets_fast_rejects_and_every_accepted_answer():
    (model,) = load_repository(tiny_repository(), {"max_queue_size": 4, "max_batch_size": 2})
    slow = SlowModel(model, 0.2)
    texts = sample_texts(40, seed=4)
    with threaded_server([slow]) as (url, _):

        def call(text: str):
            begin = time.perf_counter()
            status, answer = infer_json(url, TINY_MODEL, [text])
            return status, answer, time.perf_counter() - begin

        with ThreadPoolExecutor(40) as pool:
            results = list(pool.map(call, texts))
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=5) as response:
            assert response.status == 200
    accepted = [(t, r) for t, r in zip(texts, results, strict=True) if r[0] == 200]
    rejected = [r for r in results if r[0] != 200]
    assert len(accepted) >= 4 and rejected
    assert {status for status, _, _ in rejected} == {503}
    assert all("queue full" in answer["error"] for _, answer, _ in rejected)
    # a reject costs no queueing: a fraction of what accepted requests waited (>= one 200 ms
    # batch each); not an absolute bound, the shared machine's thread scheduling varies
    reject_s = np.median([seconds for _, _, seconds in rejected])
    assert reject_s < 0.5 * np.median([r[2] for _, r in accepted])
    for text, (_, answer, _) in accepted:
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)


def test_client_disconnect_does_not_break_the_batch():
    (model,) = load_repository(tiny_repository(), {"max_queue_delay_us": 300_000})
    texts = sample_texts(3, seed=5)
    with threaded_server([model]) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [texts[0]]}]}
        ).encode()
        leaver = socket.create_connection((host, int(port)))
        leaver.sendall(
            f"POST /v2/models/{TINY_MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with ThreadPoolExecutor(2) as pool:
            pending = [pool.submit(infer_json, url, TINY_MODEL, [t]) for t in texts[1:]]
            time.sleep(0.05)
            leaver.close()  # gone while its request waits for the batch
            answers = [future.result() for future in pending]
        time.sleep(0.05)
        cancelled = metric(url, r'inference_requests_total\{model="tiny_text",status="cancelled"\}')
        assert infer_json(url, TINY_MODEL, [texts[0]])[0] == 200
    assert cancelled == 1
    for text, (status, answer) in zip(texts[1:], answers, strict=True):
        assert status == 200
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)


def _post(url: str, text: str) -> tuple[int, dict] | str:
    try:
        return infer_json(url, TINY_MODEL, [text], timeout_s=20)
    except OSError as exc:  # refused or reset: never accepted by the server
        return type(exc).__name__


def test_sigterm_under_load_loses_no_accepted_request():
    (model,) = load_repository(tiny_repository())
    texts = sample_texts(12, seed=6)
    flags = ["--max-queue-delay-us", "5000000", "--max-batch-size", "32"]
    flags += ["--preferred-batch-size", "32"]  # nothing runs before SIGTERM: all 12 queued
    with server_process(tiny_repository(), *flags) as (url, process):
        pool = ThreadPoolExecutor(16)
        queued = [pool.submit(_post, url, t) for t in texts]
        deadline = time.monotonic() + 5
        while metric(url, r'inference_queue_size\{model="tiny_text"\}') < len(texts):
            assert time.monotonic() < deadline, "requests never reached the queue"
            time.sleep(0.01)
        stop = threading.Event()

        def keep_loading() -> list:
            results = []
            while not stop.is_set() and len(results) < 200:
                results.append(_post(url, texts[len(results) % len(texts)]))
            return results

        loaders = [pool.submit(keep_loading) for _ in range(3)]
        process.send_signal(signal.SIGTERM)
        answers = [future.result(timeout=20) for future in queued]
        exit_code = process.wait(timeout=20)
        stop.set()
        background = [r for future in loaders for r in future.result(timeout=20)]
        pool.shutdown()
        log_lines = process.stderr.read().splitlines()
    assert exit_code == 0
    for text, (status, answer) in zip(texts, answers, strict=True):
        assert status == 200
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)
    # background load: answered, refused at the door (503, "shutting down"), or never connected
    for result in background:
        assert (
            isinstance(result, str)
            or result[0] == 200
            or (result[0] == 503 and "shutting down" in result[1]["error"])
        ), result
    events = [json.loads(line)["message"] for line in log_lines if line.startswith("{")]
    assert "listening" in events and "shutting down" in events and "batchers drained" in events


def test_server_process_answers_and_stops_cleanly():
    with server_process(tiny_repository()) as (url, process):
        with urllib.request.urlopen(url + "/v2/health/live", timeout=5) as response:
            assert response.status == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    with pytest.raises(OSError):  # nothing listens any more
        http.client.HTTPConnection(url.removeprefix("http://"), timeout=2).request("GET", "/v2")
