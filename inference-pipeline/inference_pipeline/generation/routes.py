"""Generation routes beside the v2 ``infer`` route, in the shape of Triton's generate extension:

``POST /v2/models/{model}/generate``         -> one JSON answer
``POST /v2/models/{model}/generate_stream``  -> Server-Sent Events, one ``data:`` event per
                                               decoded piece, the last one carries
                                               ``finish_reason``; then the stream closes.

Body: ``{"text_input": str, "parameters": {"max_tokens", "stop", "temperature", "top_k",
"top_p", "seed"}}``. The routes find their engine at ``request.app.state.generation`` (a
:class:`GenerationService`); ``attach(app, service)`` mounts both. A client that disconnects
mid-stream cancels its request, which frees its cache blocks at the next token boundary.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import queue
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
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


class GenerationService:
    """An engine, the thread that drives it, and the name it is served under."""

    def __init__(
        self, engine: ContinuousBatchingEngine | StaticBatchingEngine, model_name: str = "bbc_gpt"
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.runner = EngineRunner(engine)

    def start(self) -> GenerationService:
        self.runner.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful: refuse new requests, finish accepted ones (up to ``timeout``), stop."""
        self.runner.stop(timeout)


def attach(app: FastAPI, service: GenerationService) -> None:
    """Mount the routes on ``app``; call ``service.start()``/``stop()`` in the app's lifespan."""
    app.state.generation = service
    app.include_router(router)


def _service(request: Request, model: str) -> GenerationService:
    service: GenerationService | None = getattr(request.app.state, "generation", None)
    if service is None:
        raise HTTPException(503, "no generation engine is attached to this server")
    if model != service.model_name:
        raise HTTPException(404, f"unknown generation model {model!r}")
    return service


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
    try:
        sampling = SamplingParams(
            float(params.get("temperature", 0.0)),
            int(params.get("top_k", 0)),
            float(params.get("top_p", 1.0)),
            None if params.get("seed") is None else int(params["seed"]),
        )
        max_tokens = int(params.get("max_tokens", 64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad parameter: {exc}") from exc
    return GenerationRequest(
        body["text_input"].encode("utf-8"), max_tokens, tuple(s.encode() for s in stop), sampling
    )


async def _submit(request: Request, model: str) -> RequestHandle:
    service = _service(request, model)
    try:
        generation_request = _parse(await request.json())
    except json.JSONDecodeError as exc:
        raise HTTPException(400, "body is not valid JSON") from exc
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    try:
        handle = service.engine.submit(generation_request)
    except QueueFull as exc:
        REQUESTS.labels("rejected").inc()
        raise HTTPException(429, str(exc)) from exc
    except EngineClosed as exc:
        REQUESTS.labels("rejected").inc()
        raise HTTPException(503, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    QUEUE_DEPTH.set(service.engine.queue_depth())
    return handle


async def _chunks(handle: RequestHandle, request: Request) -> AsyncIterator[Chunk]:
    """The handle's chunks as they come; cancels the request if the client goes away."""
    finished = False
    try:
        while True:
            try:
                chunk = await asyncio.to_thread(handle.chunks.get, True, 0.25)
            except queue.Empty:
                if await request.is_disconnected():
                    return
                continue
            yield chunk
            if chunk.finish_reason is not None:
                finished = True
                return
    finally:
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


@router.post("/v2/models/{model}/generate")
async def generate(model: str, request: Request) -> JSONResponse:
    handle = await _submit(request, model)
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
async def generate_stream(model: str, request: Request) -> StreamingResponse:
    handle = await _submit(request, model)

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
