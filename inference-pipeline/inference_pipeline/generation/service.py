"""What both generation front ends (the v2 generate routes, the OpenAI routes) share: the served
engine (:class:`GenerationService`), reading a bounded JSON body, waiting for a request's chunks
without a thread per stream, cancelling when the client leaves, and the metrics.

Metrics use vLLM's names, so dashboards built for vLLM read them unchanged (label
``model_name``): histograms ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds``,
``vllm:request_queue_time_seconds``; counters ``vllm:request_success_total{finished_reason}``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``; and, read from the engines at
scrape time, gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` (0..1) and counters ``vllm:prefix_cache_queries_total``,
``vllm:prefix_cache_hits_total`` (tokens) and ``vllm:num_preemptions_total``. Each request is
also counted once in the server's ``inference_requests_total{model, status}`` when
``attach`` was given that counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import Request
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from inference_pipeline.generation.engine import (
    ContinuousBatchingEngine,
    EngineClosed,
    EngineRunner,
    QueueFull,
    StaticBatchingEngine,
)
from inference_pipeline.generation.requests import Chunk, GenerationRequest, RequestHandle
from inference_pipeline.serving.statistics import ModelStatistics

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
DISCONNECT_POLL_S = 0.25  # how often a request checks that its client is still there
# Retry-After on 429/503: a slot frees within about one request's time, under a second for
# this model; a client that waits longer only adds latency.
RETRY_AFTER_S = 1

# Our own registry: a server exposes it beside its own, e.g.
# generate_latest(server_registry) + generate_latest(GENERATION_REGISTRY).
GENERATION_REGISTRY = CollectorRegistry()
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
TTFT = Histogram(
    "vllm:time_to_first_token_seconds", "Submit to first token", ["model_name"],
    buckets=LATENCY_BUCKETS, registry=GENERATION_REGISTRY,
)  # fmt: skip
INTER_TOKEN = Histogram(
    "vllm:inter_token_latency_seconds", "Gap between consecutive tokens", ["model_name"],
    buckets=LATENCY_BUCKETS, registry=GENERATION_REGISTRY,
)  # fmt: skip
E2E = Histogram(
    "vllm:e2e_request_latency_seconds", "Submit to finish", ["model_name"],
    buckets=LATENCY_BUCKETS, registry=GENERATION_REGISTRY,
)  # fmt: skip
QUEUE_TIME = Histogram(
    "vllm:request_queue_time_seconds", "Submit to first scheduled", ["model_name"],
    buckets=LATENCY_BUCKETS, registry=GENERATION_REGISTRY,
)  # fmt: skip
SUCCESS = Counter(
    "vllm:request_success", "Finished requests", ["model_name", "finished_reason"],
    registry=GENERATION_REGISTRY,
)  # fmt: skip
PROMPT_TOKENS = Counter(
    "vllm:prompt_tokens", "Prompt tokens of finished requests", ["model_name"],
    registry=GENERATION_REGISTRY,
)  # fmt: skip
GENERATION_TOKENS = Counter(
    "vllm:generation_tokens", "Tokens generated", ["model_name"], registry=GENERATION_REGISTRY
)


class GenerationError(Exception):
    """A refused generation request; each front end renders it in its own error shape."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


# the server's request-counter label for each refusal status
STATUS_LABELS = {
    400: "bad_request", 404: "not_found", 413: "too_large", 429: "rejected", 503: "rejected",
}  # fmt: skip


class GenerationService:
    """An engine, the thread that drives it, and the name it is served under."""

    def __init__(
        self,
        engine: ContinuousBatchingEngine | StaticBatchingEngine,
        model_name: str = "bbc_gpt",
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.max_request_bytes = max_request_bytes
        self.runner = EngineRunner(engine)
        # the server's per-model counters (the statistics extension and /metrics' request
        # counts), set when the routes are attached to a server
        self.statistics: ModelStatistics | None = None
        # per request id of each stream still open: how many times it has checked that its
        # client is still connected (the entry goes when the stream ends)
        self.disconnect_checks: dict[int, int] = {}

    def start(self) -> GenerationService:
        self.runner.start()
        return self

    def close_intake(self) -> None:
        """SIGTERM: refuse new requests (503) while accepted ones keep streaming."""
        with self.engine.work_available:
            self.engine.closed = True

    @property
    def accepting(self) -> bool:
        return not self.engine.closed

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful: refuse new requests, finish accepted ones (up to ``timeout``), stop."""
        self.runner.stop(timeout)

    def count(self, status: str, seconds: float = 0.0) -> None:
        """One request, once, in the server's request counters."""
        if self.statistics is not None:
            self.statistics.request_done(status, seconds)

    def refused(self, exc: GenerationError) -> None:
        self.count(STATUS_LABELS.get(exc.status, "refused"))

    def metadata(self) -> dict:
        """The v2 model metadata (Triton's generate extension names)."""
        return {
            "name": self.model_name,
            "versions": ["1"],
            "platform": "generation",
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
            "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}],
        }


SERVED: weakref.WeakSet[GenerationService] = weakref.WeakSet()


class EngineCollector:
    """Scheduler and cache state read from every served engine at scrape time (a value set
    at submit would go stale once the queue drains)."""

    def collect(self) -> Iterator:
        families = {
            "running": GaugeMetricFamily(
                "vllm:num_requests_running", "Sequences running", labels=["model_name"]
            ),
            "waiting": GaugeMetricFamily(
                "vllm:num_requests_waiting", "Requests waiting (preempted ones too)",
                labels=["model_name"],
            ),
            "usage": GaugeMetricFamily(
                "vllm:kv_cache_usage_perc", "Share of KV blocks in use (0..1)",
                labels=["model_name"],
            ),
            "queries": CounterMetricFamily(
                "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                labels=["model_name"],
            ),
            "hits": CounterMetricFamily(
                "vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache",
                labels=["model_name"],
            ),
            "preemptions": CounterMetricFamily(
                "vllm:num_preemptions", "Sequences preempted (recompute)", labels=["model_name"]
            ),
        }  # fmt: skip
        values: dict[str, dict[str, float]] = {key: {} for key in families}
        for service in list(SERVED):
            name, engine = service.model_name, service.engine
            add = {"waiting": engine.queue_depth()}
            if isinstance(engine, ContinuousBatchingEngine):
                stats = engine.scheduler.stats
                add |= {
                    "running": len(engine.running),
                    "usage": engine.cache.usage,
                    "queries": stats.prefix_queried_tokens,
                    "hits": stats.prefix_hit_tokens,
                    "preemptions": stats.preemptions,
                }
            for key, value in add.items():
                values[key][name] = values[key].get(name, 0.0) + float(value)
        for key, family in families.items():
            for name, value in values[key].items():
                family.add_metric([name], value)
            yield family


GENERATION_REGISTRY.register(EngineCollector())


def submit(service: GenerationService, request: GenerationRequest) -> RequestHandle:
    """Hand ``request`` to the engine: 429 when the queue is full, 503 while shutting down,
    400 when it can never fit (context, cache)."""
    try:
        return service.engine.submit(request)
    except QueueFull as exc:
        raise GenerationError(429, f"generation queue full: {exc}") from None
    except EngineClosed as exc:
        raise GenerationError(503, str(exc)) from None
    except ValueError as exc:
        raise GenerationError(400, str(exc)) from None


def retry_after(exc: GenerationError) -> dict[str, str]:
    """The headers of a refusal: ``Retry-After`` when trying again later can succeed."""
    return {"Retry-After": str(RETRY_AFTER_S)} if exc.status in (429, 503) else {}


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body, refusing (413) one over ``limit`` bytes before or while reading it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise GenerationError(413, f"request body of {int(declared)} bytes exceeds {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise GenerationError(413, f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GenerationError(400, "body is not valid JSON") from None


class LoopWaker:
    """Wakes streams waiting on one event loop from the engine's thread, with at most one
    wake-up of the loop pending: an iteration that gives a token to 16 streams schedules one
    callback (one write to the loop's self-pipe, one pass of the loop) that sets the 16
    events, not 16. The engine calls ``wake`` for each stream while it holds the GIL, so the
    callback, which runs on the loop's thread, finds the iteration's streams together."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wakeups = 0  # loop callbacks scheduled
        self._ready: list[asyncio.Event] = []
        self._lock = threading.Lock()

    def wake(self, event: asyncio.Event) -> None:
        """Set ``event`` on the loop's thread soon (called from any thread)."""
        with self._lock:
            first = not self._ready
            self._ready.append(event)
        if first:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
                self.loop.call_soon_threadsafe(self._set_ready)
                self.wakeups += 1

    def _set_ready(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for event in ready:
            event.set()


_WAKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)


def loop_waker(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The one ``LoopWaker`` of ``loop`` (every stream on a loop shares it)."""
    waker = _WAKERS.get(loop)
    if waker is None:
        waker = _WAKERS[loop] = LoopWaker(loop)
    return waker


def _wake_on_chunk(handle: RequestHandle, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    arrived = asyncio.Event()
    handle.listener = functools.partial(loop_waker(loop).wake, arrived)
    return arrived


async def stream_chunks(
    service: GenerationService, handle: RequestHandle, request: Request
) -> AsyncIterator[Chunk]:
    """The handle's chunks as they come; cancels the request if the client goes away; records
    the request's metrics when it ends.

    No thread waits per stream: the engine wakes this coroutine through ``handle.listener``
    (a thread per stream would cap concurrent streams at the default executor's size)."""
    loop = asyncio.get_running_loop()
    arrived = _wake_on_chunk(handle, loop)
    finished = False
    next_check = loop.time() + DISCONNECT_POLL_S
    service.disconnect_checks[handle.id] = 0
    try:
        while True:
            arrived.clear()
            try:
                chunk = handle.chunks.get_nowait()
            except queue.Empty:
                chunk = None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(arrived.wait(), DISCONNECT_POLL_S)
            if chunk is not None:
                yield chunk
                if chunk.finish_reason is not None:
                    finished = True
                    return
            if loop.time() >= next_check:  # also while tokens flow (non-streaming routes)
                next_check = loop.time() + DISCONNECT_POLL_S
                service.disconnect_checks[handle.id] += 1
                if await request.is_disconnected():
                    return
    finally:
        handle.listener = None
        service.disconnect_checks.pop(handle.id, None)
        if not finished:
            handle.cancel()
        record(service, handle)


def record(service: GenerationService, handle: RequestHandle) -> None:
    """A request's latencies and token counts, and its outcome in the request counters."""
    name = service.model_name
    ttft, gaps = handle.timings()
    if ttft is not None:
        TTFT.labels(name).observe(ttft)
    inter_token = INTER_TOKEN.labels(name)
    for gap in gaps:
        inter_token.observe(gap)
    if handle.admitted_at is not None:
        QUEUE_TIME.labels(name).observe(handle.admitted_at - handle.submitted_at)
    reason = handle.finish_reason or "cancelled"
    if handle.finished_at is not None:
        E2E.labels(name).observe(handle.finished_at - handle.submitted_at)
    GENERATION_TOKENS.labels(name).inc(len(handle.tokens))
    PROMPT_TOKENS.labels(name).inc(len(handle.request.prompt))
    SUCCESS.labels(name, reason).inc()
    in_server = (handle.finished_at or time.perf_counter()) - handle.submitted_at
    service.count({"length": "success", "stop": "success"}.get(reason, reason), in_server)
