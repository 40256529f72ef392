"""Generation routes beside the v2 ``infer`` route, in the shape of Triton's generate extension:

``POST /v2/models/{model}/generate``         -> one JSON answer
``POST /v2/models/{model}/generate_stream``  -> Server-Sent Events, one ``data:`` event per
                                               decoded piece, the last one carries
                                               ``finish_reason``; then the stream closes.

Body: ``{"text_input": str, "parameters": {"max_tokens", "stop", "temperature", "top_k",
"top_p", "seed"}}``. Errors are ``{"error": "<one line>"}`` as on the v2 routes: 400 malformed,
404 unknown model, 413 body too large, 429 queue full (``Retry-After``), 503 shutting down.

``attach(app, service)`` mounts these and the OpenAI-compatible routes
(:mod:`inference_pipeline.generation.openai_routes`) and serves ``service`` under its model
name; the routes find their engines in ``request.app.state.generation``. A client that
disconnects mid-stream cancels its request, which frees its cache blocks at the next token
boundary.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from inference_pipeline.generation import openai_routes
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.sampling import SamplingParams
from inference_pipeline.generation.service import (
    GENERATION_REGISTRY,
    SERVED,
    GenerationError,
    GenerationService,
    read_json,
    retry_after,
    stream_chunks,
    submit,
)
from inference_pipeline.serving.statistics import ModelStatistics

__all__ = ["GENERATION_REGISTRY", "GenerationService", "attach", "router"]

router = APIRouter()


def attach(
    app: FastAPI, service: GenerationService, statistics: ModelStatistics | None = None
) -> None:
    """Mount the v2 generate and the OpenAI routes on ``app`` (once) and serve ``service``
    under its model name; ``statistics`` (the server's counters for this model: the
    statistics extension and /metrics' request counts) counts each request once. Call
    ``service.start()``/``stop()`` in the app's lifespan."""
    services = getattr(app.state, "generation", None)
    if services is None:
        services = app.state.generation = {}
        app.include_router(router)
        app.include_router(openai_routes.router)
    services[service.model_name] = service
    service.statistics = statistics
    SERVED.add(service)


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


async def _submit(request: Request, model: str) -> tuple[GenerationService, Any]:
    service = _service(request, model)
    try:
        body = await read_json(request, service.max_request_bytes)
        try:
            parsed = _parse(body)
        except ValueError as exc:
            raise GenerationError(400, str(exc)) from None
        return service, submit(service, parsed)
    except GenerationError as exc:
        service.refused(exc)
        raise


def _error(exc: GenerationError) -> JSONResponse:
    headers = retry_after(exc)
    return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)


@router.post("/v2/models/{model}/generate")
async def generate(model: str, request: Request) -> JSONResponse:
    try:
        service, handle = await _submit(request, model)
    except GenerationError as exc:
        return _error(exc)
    async for _ in stream_chunks(service, handle, request):
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
        service, handle = await _submit(request, model)
    except GenerationError as exc:
        return _error(exc)

    async def events() -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # bytes may split a char
        index = 0
        async for chunk in stream_chunks(service, handle, request):
            text = decoder.decode(chunk.data, final=chunk.finish_reason is not None)
            event: dict[str, Any] = {"model_name": model, "index": index, "text_output": text}
            if chunk.finish_reason is not None:
                event["finish_reason"] = chunk.finish_reason
            index += 1
            yield f"data: {json.dumps(event)}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
