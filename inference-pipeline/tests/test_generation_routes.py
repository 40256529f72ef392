"""The streaming generation routes on a loopback uvicorn server (FastAPI app of our own)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import asynccontextmanager

import pytest
import uvicorn
from fastapi import FastAPI
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.routes import attach
from inference_pipeline.generation.service import (
    GENERATION_REGISTRY,
    GENERATION_TOKENS,
    SUCCESS,
    GenerationService,
)
from inference_pipeline_harness.serving_fixtures import CountingStep, wait_until
from prometheus_client import generate_latest


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, GenerationService]]:
    service = GenerationService(
        ContinuousBatchingEngine(CountingStep(0.002), max_num_seqs=4, max_queue=8)
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        service.stop()

    app = FastAPI(lifespan=lifespan)
    attach(app, service)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: uv.started, "the server's start")
    yield port, service
    uv.should_exit = True
    thread.join(10)
    sock.close()


def post(port: int, path: str, body: object) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return conn.getresponse()


def sse_events(response: http.client.HTTPResponse) -> list[dict]:
    events = []
    for line in response.read().decode().split("\n"):
        if line.startswith("data: "):
            events.append(json.loads(line[len("data: ") :]))
    return events


def test_stream_delivers_tokens_in_order_and_ends_cleanly(server) -> None:
    port, _ = server
    body = {"text_input": "a", "parameters": {"max_tokens": 25}}
    response = post(port, "/v2/models/bbc_gpt/generate_stream", body)
    assert response.status == 200 and response.getheader("content-type").startswith(
        "text/event-stream"
    )
    events = sse_events(response)
    assert [e["index"] for e in events] == list(range(len(events)))
    assert "".join(e["text_output"] for e in events) == "bcdefghijklmnopqrstuvwxyz"
    assert events[-1]["finish_reason"] == "length"
    assert all("finish_reason" not in e for e in events[:-1])


def test_stop_sequence_and_non_streaming_route(server) -> None:
    port, _ = server
    body = {"text_input": "k", "parameters": {"max_tokens": 20, "stop": ["pq"]}}
    response = post(port, "/v2/models/bbc_gpt/generate", body)
    answer = json.loads(response.read())
    assert response.status == 200
    assert answer["text_output"] == "lmno" and answer["finish_reason"] == "stop"


def test_concurrent_streams_each_get_their_own_tokens(server) -> None:
    port, _ = server
    results: dict[str, str] = {}

    def one(start: str) -> None:
        body = {"text_input": start, "parameters": {"max_tokens": 10}}
        events = sse_events(post(port, "/v2/models/bbc_gpt/generate_stream", body))
        results[start] = "".join(e["text_output"] for e in events)

    threads = [threading.Thread(target=one, args=(c,)) for c in "AHPa"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {"A": "BCDEFGHIJK", "H": "IJKLMNOPQR", "P": "QRSTUVWXYZ", "a": "bcdefghijk"}


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v2/models/bbc_gpt/generate_stream", {"text_input": 3}, 400),
        (
            "/v2/models/bbc_gpt/generate_stream",
            {"text_input": "a", "parameters": {"max_tokens": 0}},
            400,
        ),
        ("/v2/models/bbc_gpt/generate_stream", {"text_input": "a", "parameters": {"nope": 1}}, 400),
        ("/v2/models/bbc_gpt/generate_stream", {"text_input": "a" * 300}, 400),
        ("/v2/models/other/generate_stream", {"text_input": "a"}, 404),
    ],
)
def test_bad_requests_get_a_clear_error(server, path: str, body: dict, status: int) -> None:
    port, _ = server
    response = post(port, path, body)
    assert response.status == status
    assert set(json.loads(response.read())) == {"error"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v2/models/bbc_gpt/generate_stream",
            {"text_input": "a", "parameters": {"max_tokens": 250}},
        ),
        ("/v1/completions", {"model": "bbc_gpt", "prompt": "a", "max_tokens": 250, "stream": True}),
        ("/v1/completions", {"model": "bbc_gpt", "prompt": "a", "max_tokens": 250}),
    ],
)
def test_client_disconnect_cancels_and_frees_blocks(server, path: str, body: dict) -> None:
    port, service = server
    cancelled = SUCCESS.labels("bbc_gpt", "cancelled")
    cancelled_before = cancelled._value.get()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    if not (path.endswith("_stream") or body.get("stream")):  # nothing comes before the end
        engine = service.engine
        wait_until(lambda: engine.running, "the request's admission")
        conn.close()
    else:
        response = conn.getresponse()
        assert response.readline().startswith(b"data: ")
        conn.close()  # walk away mid-stream
    cache = service.engine.cache
    wait_until(
        lambda: cache.free_blocks == cache.num_blocks and not service.engine.running,
        "every block freed after the disconnect",
    )
    cache.check()
    # it ended because the client left, not because it ran out of tokens; the route records
    # the outcome once its stream loop ends
    wait_until(lambda: cancelled._value.get() == cancelled_before + 1, "the cancelled count")
    assert cancelled._value.get() == cancelled_before + 1


def test_metrics_count_tokens_and_latencies(server) -> None:
    port, _ = server
    tokens = GENERATION_TOKENS.labels("bbc_gpt")
    before = tokens._value.get()
    events = sse_events(post(port, "/v2/models/bbc_gpt/generate_stream", {"text_input": "a"}))
    assert events[-1]["finish_reason"] == "length"
    assert tokens._value.get() == before + 64  # max_tokens defaults to 64
    text = generate_latest(GENERATION_REGISTRY).decode()
    for name in (
        "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
        'vllm:num_requests_running{model_name="bbc_gpt"}',
        'vllm:num_requests_waiting{model_name="bbc_gpt"} 0.0',
        'vllm:kv_cache_usage_perc{model_name="bbc_gpt"}',
        'vllm:prefix_cache_queries_total{model_name="bbc_gpt"}',
        'vllm:prefix_cache_hits_total{model_name="bbc_gpt"}',
        'vllm:num_preemptions_total{model_name="bbc_gpt"} 0.0',
    ):  # fmt: skip
        assert name in text, name


def test_openai_completion_and_raw_sse_of_the_counting_model(server) -> None:
    port, _ = server
    body = {"model": "bbc_gpt", "prompt": "k", "max_tokens": 20, "stop": "pq", "temperature": 0}
    answer = json.loads(post(port, "/v1/completions", body).read())
    assert (
        answer["choices"][0]["text"] == "lmno" and answer["choices"][0]["finish_reason"] == "stop"
    )
    assert answer["usage"] == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}
    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    raw = post(port, "/v1/completions", stream).read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in events if c["choices"]) == "lmno"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 6


def metric(text: str, name: str) -> float:
    head = f'{name}{{model_name="bbc_gpt"}} '
    return next(float(line[len(head) :]) for line in text.splitlines() if line.startswith(head))


def test_prefix_cache_hits_on_metrics_match_the_shared_blocks(server) -> None:
    port, _ = server
    shared = "The Bank of England said on Monday that it would "  # 50 bytes: 3 full blocks
    before = generate_latest(GENERATION_REGISTRY).decode()
    prompts = [shared + "raise rates", shared + "hold"]
    for prompt in prompts:  # one after the other: the first one's blocks are cached
        body = {"model": "bbc_gpt", "prompt": prompt, "max_tokens": 4, "temperature": 0}
        answer = json.loads(post(port, "/v1/completions", body).read())
        assert answer["usage"]["completion_tokens"] == 4
    after = generate_latest(GENERATION_REGISTRY).decode()
    hits = metric(after, "vllm:prefix_cache_hits_total")
    queries = metric(after, "vllm:prefix_cache_queries_total")
    assert hits - metric(before, "vllm:prefix_cache_hits_total") == 48
    assert queries - metric(before, "vllm:prefix_cache_queries_total") == sum(map(len, prompts))
