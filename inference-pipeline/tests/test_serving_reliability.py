"""Reliability under concurrency, overload, disconnects and SIGTERM (real servers, loopback)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_MODEL,
    accepted_or_refused_at_the_door,
    infer_json,
    metric,
    queue_size_metric,
    sample_texts,
    server_process,
    sigterm_under_load,
    threaded_server,
    tiny_repository,
    wait_until,
)


def alone(model, text: str) -> np.ndarray:
    prepared = model.prepare({"TEXT": np.array([text], dtype=object)})
    return model.run_batch(0, [prepared.data])[0]["logits"][0]


def logits_of(answer: dict) -> np.ndarray:
    tensor = next(o for o in answer["outputs"] if o["name"] == "logits")
    return np.array(tensor["data"], dtype=np.float32).reshape(tensor["shape"])


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


class GatedModel:
    """A served model whose batches wait for ``gate``: while it is closed the one instance is
    busy, so what the server does meanwhile (queue, reject, drop) is decided by its rules."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.gate = threading.Event()
        self.batches: list[int] = []  # rows of every batch that started
        self.lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def run_batch(self, instance: int, batch: list) -> list:
        with self.lock:
            self.batches.append(len(batch))
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        return self._inner.run_batch(instance, batch)


QUEUE = queue_size_metric(TINY_MODEL)


def test_burst_beyond_queue_limit_gets_fast_rejects_and_every_accepted_answer():
    (model,) = load_repository(tiny_repository(), {"max_queue_size": 4, "max_batch_size": 2})
    gated = GatedModel(model)
    texts = sample_texts(40, seed=4)
    with threaded_server([gated]) as (url, _), ThreadPoolExecutor(40) as pool:
        futures = [pool.submit(infer_json, url, TINY_MODEL, [t]) for t in texts]
        # the instance is held busy: every request is either running, queued (4), or answered
        # at once with a reject. Rejects that waited for room would never come back.
        wait_until(lambda: gated.batches and metric(url, QUEUE) == 4, "a full queue")
        wait_until(
            lambda: sum(f.done() for f in futures) == len(texts) - 4 - gated.batches[0],
            "every reject",
        )
        early = [f.result() for f in futures if f.done()]
        gated.gate.set()
        results = [f.result() for f in futures]
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=5) as response:
            assert response.status == 200
    assert {status for status, _ in early} == {503}
    assert all("queue full" in answer["error"] for _, answer in early)
    accepted = [(t, r) for t, r in zip(texts, results, strict=True) if r[0] == 200]
    assert len(accepted) == 4 + gated.batches[0] == len(texts) - len(early)
    for text, (_, answer) in accepted:
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)


def test_client_disconnect_does_not_break_the_batch():
    (model,) = load_repository(tiny_repository(), {"max_batch_size": 4})
    gated = GatedModel(model)
    texts = sample_texts(3, seed=5)
    cancelled = r'inference_requests_total\{model="tiny_text",status="cancelled"\}'
    with threaded_server([gated]) as (url, _), ThreadPoolExecutor(2) as pool:
        host, port = url.removeprefix("http://").split(":")
        blocker = pool.submit(infer_json, url, TINY_MODEL, [texts[1]])
        wait_until(lambda: gated.batches, "the first batch")  # the instance is now busy
        body = json.dumps(
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [texts[0]]}]}
        ).encode()
        leaver = socket.create_connection((host, int(port)))
        leaver.sendall(
            f"POST /v2/models/{TINY_MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        stayer = pool.submit(infer_json, url, TINY_MODEL, [texts[2]])
        wait_until(lambda: metric(url, QUEUE) == 2, "both requests queued")
        leaver.close()  # gone while its request waits behind the busy instance
        wait_until(lambda: metric(url, cancelled) == 1, "the disconnect noticed")
        gated.gate.set()
        answers = [blocker.result(), stayer.result()]
        assert infer_json(url, TINY_MODEL, [texts[0]])[0] == 200
        final_cancelled = metric(url, cancelled)
    assert final_cancelled == 1
    assert gated.batches == [1, 1, 1]  # the leaver's request never reached the model
    for text, (status, answer) in zip(texts[1:], answers, strict=True):
        assert status == 200
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)


def test_sigterm_under_load_loses_no_accepted_request():
    (model,) = load_repository(tiny_repository())
    texts = sample_texts(12, seed=6)
    flags = ["--max-queue-delay-us", "5000000", "--max-batch-size", "32"]
    flags += ["--preferred-batch-size", "32"]  # nothing runs before SIGTERM: all 12 queued
    with server_process(tiny_repository(), *flags) as (url, process):
        drain = sigterm_under_load(
            url, process, TINY_MODEL, texts, texts, loaders=3, load_requests=200, timeout_s=20
        )
    assert drain.exit_code == 0
    for text, (status, answer) in zip(texts, drain.answers, strict=True):
        assert status == 200
        np.testing.assert_allclose(logits_of(answer)[0], alone(model, text), atol=1e-4)
    # background load: answered, refused at the door (503, "shutting down"), or never connected
    for result in drain.background:
        assert accepted_or_refused_at_the_door(result), result
    assert {"listening", "shutting down", "batchers drained"} <= set(drain.events)


def test_server_process_answers_and_stops_cleanly():
    """It answers, stops on SIGTERM with status 0, and had frozen its start-up objects out of
    the garbage collector before it listened (a full collection over torch's objects would
    stall every request in flight)."""
    with server_process(tiny_repository()) as (url, process):
        with urllib.request.urlopen(url + "/v2/health/live", timeout=5) as response:
            assert response.status == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        logs = [json.loads(line) for line in process.stderr.read().splitlines()
                if line.startswith("{")]  # fmt: skip
    listening = next(entry for entry in logs if entry.get("message") == "listening")
    assert listening["gc_frozen_objects"] > 10_000  # torch alone holds more than this
    with pytest.raises(OSError):  # nothing listens any more
        http.client.HTTPConnection(url.removeprefix("http://"), timeout=2).request("GET", "/v2")
