"""Generation routes beside the v2 ``infer`` route, in the shape of Triton's generate extension:

``POST /v2/models/{model}/generate``         -> one JSON answer
``POST /v2/models/{model}/generate_stream``  -> Server-Sent Events, one ``data:`` event per
                                               decoded piece, the last one carries
                                               ``finish_reason``; then the stream closes.

Body: ``{"text_input": str, "parameters": {"max_tokens", "stop", "temperature", "top_k",
"top_p", "seed"}}``. Errors are ``{"error": "<one line>"}`` as on the v2 routes: 400 malformed,
404 unknown model, 413 body too large, 503 queue full or shutting down. The routes find their
engines in ``request.app.state.generation`` (model name -> :class:`GenerationService`);
``attach(app, service)`` mounts them. A client that disconnects
mid-stream cancels its request, which frees its cache blocks at the next token boundary.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import queue
import weakref
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inference_pipeline.generation.engine import (
    ContinuousBatchingEngine,
    EngineClosed,
    EngineRunner,
    QueueFull,
    StaticBatchingEngine,
)
from inference_pipeline.generation.requests import Chunk, GenerationRequest, RequestHandle
from inference_pipeline.generation.sampling import SamplingParams

router = APIRouter()

# Our own registry: a server exposes it beside its own, e.g.
# generate_latest(server_registry) + generate_latest(GENERATION_REGISTRY).
GENERATION_REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "generation_requests_total", "Generation requests by outcome", ["outcome"],
    registry=GENERATION_REGISTRY,
)  # fmt: skip
TOKENS = Counter("generation_tokens_total", "Tokens generated", registry=GENERATION_REGISTRY)
TTFT = Histogram(
    "generation_time_to_first_token_seconds", "Submit to first token",
    registry=GENERATION_REGISTRY,
)  # fmt: skip
INTER_TOKEN = Histogram(
    "generation_inter_token_seconds", "Gap between tokens",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    registry=GENERATION_REGISTRY,
)  # fmt: skip
QUEUE_DEPTH = Gauge(
    "generation_queue_depth", "Requests waiting for a batch slot", registry=GENERATION_REGISTRY
)
# Read at scrape time from every served engine (a value set at submit would go stale once the
# queue drains).
_SERVED_ENGINES: weakref.WeakSet = weakref.WeakSet()
QUEUE_DEPTH.set_function(lambda: sum(engine.queue_depth() for engine in list(_SERVED_ENGINES)))


DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
DISCONNECT_POLL_S = 0.25  # how often a request checks that its client is still there


class GenerationError(Exception):
    """A refused generation request: answered ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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

    def metadata(self) -> dict:
        """The v2 model metadata (Triton's generate extension names)."""
        return {
            "name": self.model_name,
            "versions": ["1"],
            "platform": "generation",
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
            "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}],
        }


def attach(app: FastAPI, service: GenerationService) -> None:
    """Mount the routes on ``app`` (once) and serve ``service`` under its model name; call
    ``service.start()``/``stop()`` in the app's lifespan."""
    services = getattr(app.state, "generation", None)
    if services is None:
        services = app.state.generation = {}
        app.include_router(router)
    services[service.model_name] = service
    _SERVED_ENGINES.add(service.engine)


def _service(request: Request, model: str) -> GenerationService:
    services: dict[str, GenerationService] = getattr(request.app.state, "generation", {})
    if model not in services:
        raise GenerationError(404, f"unknown generation model {model!r}")
    return services[model]


def _parse(body: Any) -> GenerationRequest:
    if not isinstance(body, dict) or not isinstance(body.get("text_input"), str):
        raise ValueError("body must be a JSON object with a string 'text_input'")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise ValueError("'parameters' must be an object")
    unknown = set(params) - {"max_tokens", "stop", "temperature", "top_k", "top_p", "seed"}
    if unknown:
        raise ValueError(f"unknown parameters: {', '.join(sorted(unknown))}")
    stop = params.get("stop", [])
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ValueError("'stop' must be a string or a list of strings")
    for name in ("max_tokens", "top_k", "seed"):  # int() would quietly turn 1.7 into 1
        value = params.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"'{name}' must be an integer, got {value!r}")
    try:
        sampling = SamplingParams(
            float(params.get("temperature", 0.0)),
            params.get("top_k", 0),
            float(params.get("top_p", 1.0)),
            params.get("seed"),
        )
        max_tokens = params.get("max_tokens", 64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad parameter: {exc}") from exc
    return GenerationRequest(
        body["text_input"].encode("utf-8"), max_tokens, tuple(s.encode() for s in stop), sampling
    )


async def _read_json(request: Request, limit: int) -> Any:
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


async def _submit(request: Request, model: str) -> RequestHandle:
    service = _service(request, model)
    body = await _read_json(request, service.max_request_bytes)
    try:
        handle = service.engine.submit(_parse(body))
    except QueueFull as exc:
        REQUESTS.labels("rejected").inc()
        raise GenerationError(503, f"generation queue full: {exc}") from None
    except EngineClosed as exc:
        REQUESTS.labels("rejected").inc()
        raise GenerationError(503, str(exc)) from None
    except ValueError as exc:
        REQUESTS.labels("bad_request").inc()
        raise GenerationError(400, str(exc)) from None
    return handle


def _wake_on_chunk(handle: RequestHandle, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    arrived = asyncio.Event()

    def wake() -> None:  # on the engine's thread
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
            loop.call_soon_threadsafe(arrived.set)

    handle.listener = wake
    return arrived


async def _chunks(handle: RequestHandle, request: Request) -> AsyncIterator[Chunk]:
    """The handle's chunks as they come; cancels the request if the client goes away.

    No thread waits per stream: the engine wakes this coroutine through ``handle.listener``
    (a thread per stream would cap concurrent streams at the default executor's size)."""
    loop = asyncio.get_running_loop()
    arrived = _wake_on_chunk(handle, loop)
    finished = False
    next_check = loop.time() + DISCONNECT_POLL_S
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
            if loop.time() >= next_check:  # also while tokens flow (the /generate route)
                next_check = loop.time() + DISCONNECT_POLL_S
                if await request.is_disconnected():
                    return
    finally:
        handle.listener = None
        if not finished:
            handle.cancel()
        _record(handle)


def _record(handle: RequestHandle) -> None:
    ttft, gaps = handle.timings()
    if ttft is not None:
        TTFT.observe(ttft)
    for gap in gaps:
        INTER_TOKEN.observe(gap)
    TOKENS.inc(len(handle.tokens))
    REQUESTS.labels(handle.finish_reason or "cancelled").inc()


def _error(exc: GenerationError) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


@router.post("/v2/models/{model}/generate")
async def generate(model: str, request: Request) -> JSONResponse:
    try:
        handle = await _submit(request, model)
    except GenerationError as exc:
        return _error(exc)
    async for _ in _chunks(handle, request):
        pass
    return JSONResponse(
        {
            "model_name": model,
            "text_output": handle.output.decode("utf-8", "replace"),
            "finish_reason": handle.finish_reason,
            "generated_tokens": len(handle.tokens),
        }
    )


@router.post("/v2/models/{model}/generate_stream")
async def generate_stream(model: str, request: Request) -> Response:
    try:
        handle = await _submit(request, model)
    except GenerationError as exc:
        return _error(exc)

    async def events() -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # bytes may split a char
        index = 0
        async for chunk in _chunks(handle, request):
            text = decoder.decode(chunk.data, final=chunk.finish_reason is not None)
            event: dict[str, Any] = {"model_name": model, "index": index, "text_output": text}
            if chunk.finish_reason is not None:
                event["finish_reason"] = chunk.finish_reason
            index += 1
            yield f"data: {json.dumps(event)}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
