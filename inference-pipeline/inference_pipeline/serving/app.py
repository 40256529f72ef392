"""The one v2 front end: FastAPI routes over the dynamic batchers of a model repository.

Both ways of serving use it: ``serve`` runs ``InferenceServer.app`` on uvicorn
(``serving.runner``), ``serve --ray`` runs the same app in every Ray Serve replica
(``serving.ray_deployment``), so decoding, validation, routing, JSON/binary encoding with
their content types, the error -> status mapping, the request-size limit, the versions
routes, the extensions list and the statistics live here once.

Routes (KServe / Open Inference Protocol v2, plus Triton's config route, its statistics
extension and /metrics): ``GET /v2``, ``/v2/health/live``, ``/v2/health/ready``,
``/v2/models/{name}``, ``/v2/models/{name}/ready``, ``/v2/models/{name}/config``,
``/v2/models/{name}/stats``, ``POST /v2/models/{name}/infer`` (each model route also under
``/versions/{version}``), ``GET /v2/models/stats`` and ``GET /metrics``; with generation
models (GenerationService), also ``POST /v2/models/{gpt}/generate`` and ``generate_stream``
(see inference_pipeline.generation.routes), whose metrics join ``/metrics``.
Every error is ``{"error": "<one line>"}`` with its status: 400 malformed, 404 unknown model,
413 body too large, 503 queue full or shutting down, 504 queue timeout, 500 model failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference_pipeline.serving.batcher import (
    BatcherClosedError,
    DynamicBatcher,
    InvalidRequestError,
    QueueFullError,
    RequestTimeoutError,
)
from inference_pipeline.serving.metrics import ServerMetrics
from inference_pipeline.serving.models import ServedModel
from inference_pipeline.serving.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    encode_infer_response,
    parse_infer_request,
)
from inference_pipeline.serving.statistics import (
    ModelStatistics,
    counter_families,
    triton_json,
)

if TYPE_CHECKING:  # generation pulls in torch; imported only when a GPT is served
    from inference_pipeline.generation.routes import GenerationService

log = logging.getLogger("inference_pipeline.serving")
SERVER_NAME = "inference_pipeline"
EXTENSIONS = ["binary_tensor_data", "statistics"]
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
BATCHER_ERRORS = {
    QueueFullError: (503, "rejected"),
    BatcherClosedError: (503, "rejected"),
    RequestTimeoutError: (504, "timeout"),
    InvalidRequestError: (400, "bad_request"),
}


STATUS_LABELS = {400: "bad_request", 404: "not_found", 413: "too_large", 499: "cancelled"}


class ClientGoneError(Exception):
    """The client disconnected before its answer was ready."""


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


@dataclass
class ServedEntry:
    model: ServedModel
    batcher: DynamicBatcher
    output_types: dict[str, str]
    statistics: ModelStatistics


def counted_run(model: ServedModel, statistics: ModelStatistics):
    """``model.run_batch`` that records each successful execution (rows, compute phases)."""

    def run(instance: int, batch: list) -> list[dict]:
        results = model.run_batch(instance, batch)
        rows = sum(len(next(iter(result.values()))) for result in results)
        statistics.batch_done(rows, model.phases[instance])
        return results

    return run


class StatisticsView:
    """Where the statistics routes and /metrics read the counters: this process's own.
    (The Ray deployment's view sums every replica's.)"""

    async def start(self, server: InferenceServer) -> None:
        """Called when the server starts (on its event loop)."""

    async def stop(self) -> None:
        """Called when the server has drained."""

    async def gather(self, local: list[dict]) -> list[dict]:
        return local


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) one over ``limit`` bytes before or while reading it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProtocolError(f"request body of {int(declared)} bytes exceeds {limit}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProtocolError(f"request body exceeds {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class InferenceServer:
    """The models, their batchers and the metrics; ``app`` is the ASGI application."""

    def __init__(
        self,
        models: list[ServedModel],
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        generation: Sequence[GenerationService] = (),
        drain_timeout_s: float = 60.0,
        statistics_view: StatisticsView | None = None,
    ):
        self.metrics = ServerMetrics()
        self.statistics_view = statistics_view or StatisticsView()
        # requests for no such model, by status (this process's: never summed across replicas)
        self.unknown_requests: dict[str, int] = {}
        self.drain_timeout_s = drain_timeout_s
        self.max_request_bytes = max_request_bytes
        self.entries: dict[str, ServedEntry] = {}
        for model in models:
            statistics = ModelStatistics(model.name, model.version)
            run = counted_run(model, statistics)
            observer = self.metrics.observer(model.name, statistics)
            batcher = DynamicBatcher(model.batching, run, observer, model.name)
            types = {spec.name: spec.datatype for spec in model.outputs}
            self.entries[model.name] = ServedEntry(model, batcher, types, statistics)
        self.ready = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # other routers mounted on ``app`` (e.g. generation's) expose their metrics here too
        self.extra_registries: list = []
        self.generation: dict[str, GenerationService] = {}
        for service in generation:
            if service.model_name in self.entries or service.model_name in self.generation:
                raise ValueError(f"model name {service.model_name!r} is served twice")
            service.max_request_bytes = max_request_bytes
            self.generation[service.model_name] = service
        self.app = self._build_app()
        if self.generation:
            from inference_pipeline.generation.routes import GENERATION_REGISTRY, attach

            for service in self.generation.values():
                attach(self.app, service)
            self.extra_registries.append(GENERATION_REGISTRY)

    def begin_shutdown(self) -> None:
        """SIGTERM: report not ready, refuse new requests, run queued ones at once."""
        self.ready = False
        for entry in self.entries.values():
            entry.batcher.begin_close()
        for service in self.generation.values():
            service.close_intake()  # accepted streams keep going until they finish

    @contextlib.asynccontextmanager
    async def lifespan(self, app: FastAPI):
        self.loop = asyncio.get_running_loop()
        for entry in self.entries.values():
            await entry.batcher.start()
        for service in self.generation.values():
            service.start()
        await self.statistics_view.start(self)
        self.ready = True
        log.info(
            "models ready",
            extra={"models": {n: vars(e.model.batching) for n, e in self.entries.items()}},
        )
        try:
            yield
        finally:
            self.ready = False
            for entry in self.entries.values():
                await entry.batcher.close()  # finishes every accepted request
            for service in self.generation.values():  # finishes every accepted stream
                await asyncio.to_thread(service.stop, self.drain_timeout_s)
            await self.statistics_view.stop()
            log.info("batchers drained", extra={"models": list(self.entries)})

    def _entry(self, name: str, version: str | None = None) -> ServedEntry:
        entry = self.entries.get(name)
        if entry is None or (version is not None and version != entry.model.version):
            suffix = f" version {version}" if version is not None else ""
            raise ProtocolError(f"unknown model {name!r}{suffix}", 404)
        return entry

    async def infer(self, request: Request, name: str, version: str | None) -> Response:
        started = time.perf_counter()
        status, label = 200, "success"
        try:
            entry = self._entry(name, version)
            response = await self._infer(request, entry)
        except ProtocolError as exc:
            status, label = exc.status, STATUS_LABELS.get(exc.status, "refused")
            response = error(exc.status, str(exc))
        except ClientGoneError:  # nobody will read this answer
            status, label = 499, "cancelled"
            response = Response(status_code=499)
        except tuple(BATCHER_ERRORS) as exc:
            status, label = BATCHER_ERRORS[type(exc)]
            response = error(status, str(exc))
        except Exception as exc:  # the model itself failed
            log.exception("inference failed", extra={"model": name})
            status, label = 500, "error"
            response = error(500, f"inference failed: {exc}")
        finally:
            seconds = time.perf_counter() - started
            entry = self.entries.get(name)
            if entry is not None:
                entry.statistics.request_done(label, seconds)
            else:
                self.unknown_requests[label] = self.unknown_requests.get(label, 0) + 1
            model_label = name if entry is not None else "_unknown"
            self.metrics.request_time.labels(model_label).observe(seconds)
            if status >= 400 and status != 499:
                log.warning("request refused", extra={"model": name, "status": status})
        return response

    async def _infer(self, request: Request, entry: ServedEntry) -> Response:
        body = await read_body(request, self.max_request_bytes)
        specs = {spec.name: spec for spec in entry.model.inputs}
        parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH), specs)
        try:
            prepared = entry.model.prepare(parsed.inputs)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        submit = asyncio.ensure_future(
            entry.batcher.submit(
                prepared.data,
                rows=prepared.rows,
                length=prepared.length,
                shape_key=prepared.shape_key,
                priority=parsed.priority,
                timeout_us=parsed.timeout_us,
            )
        )
        gone = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({submit, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not submit.done():  # the client left: drop its request, answer nobody
            submit.cancel()
            raise ClientGoneError
        outputs = submit.result()
        body, header_length = encode_infer_response(
            entry.model.name, entry.model.version, parsed, outputs, entry.output_types
        )
        headers = {HEADER_LENGTH: str(header_length)} if header_length is not None else None
        media = "application/octet-stream" if header_length is not None else "application/json"
        return Response(body, headers=headers, media_type=media)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="v2 inference server", lifespan=self.lifespan, openapi_url=None)

        @app.exception_handler(StarletteHTTPException)
        async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
            return error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")

        @app.exception_handler(ProtocolError)
        async def protocol_error(request: Request, exc: ProtocolError) -> JSONResponse:
            return error(exc.status, str(exc))

        @app.get("/v2")
        async def server_metadata() -> dict:
            return {"name": SERVER_NAME, "version": "1", "extensions": EXTENSIONS}

        @app.get("/v2/health/live")
        async def live() -> dict:
            return {"live": True}

        @app.get("/v2/health/ready")
        async def ready() -> Response:
            if not self.ready:
                return error(503, "not ready")
            return JSONResponse({"ready": True})

        @app.get("/v2/models/stats")  # before /v2/models/{name}: "stats" is no model name
        async def all_statistics() -> dict:
            return triton_json(await self.statistics())

        for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
            self._add_model_routes(app, prefix)

        @app.get("/metrics")
        async def metrics() -> Response:
            families = counter_families(await self.statistics(), dict(self.unknown_requests))
            counters = CollectorRegistry()
            counters.register(_Families(families))
            registries = [counters, self.metrics.registry, *self.extra_registries]
            body = b"".join(generate_latest(registry) for registry in registries)
            return Response(body, media_type=CONTENT_TYPE_LATEST)

        return app

    async def statistics(self, name: str | None = None, version: str | None = None) -> list:
        """Every model's statistics snapshot (or model ``name``'s), as the view sums them."""
        if name is not None:
            self._entry(name, version)  # 404 for an unknown model or version
        local = [entry.statistics.snapshot() for entry in self.entries.values()]
        snapshots = await self.statistics_view.gather(local)
        return [s for s in snapshots if name is None or s["name"] == name]

    def _add_model_routes(self, app: FastAPI, prefix: str) -> None:
        async def metadata(name: str, version: str | None = None) -> dict:
            if name in self.generation and version in (None, "1"):
                return self.generation[name].metadata()
            return self._entry(name, version).model.metadata()

        async def model_ready(name: str, version: str | None = None) -> Response:
            if name in self.generation and version in (None, "1"):
                accepting = self.generation[name].accepting
            else:
                accepting = self._entry(name, version).batcher.accepting
            if not (self.ready and accepting):
                return error(503, f"model {name!r} is not ready")
            return JSONResponse({"name": name, "ready": True})

        async def config(name: str, version: str | None = None) -> dict:
            model = self._entry(name, version).model
            return {
                "name": model.name,
                "platform": model.config.platform,
                "max_batch_size": model.batching.max_batch_size,
                "dynamic_batching": vars(model.batching),
                "parameters": model.config.parameters,
            }

        async def infer(request: Request, name: str, version: str | None = None) -> Response:
            return await self.infer(request, name, version)

        async def statistics(name: str, version: str | None = None) -> dict:
            return triton_json(await self.statistics(name, version))

        app.add_api_route(prefix, metadata, methods=["GET"])
        app.add_api_route(prefix + "/ready", model_ready, methods=["GET"])
        app.add_api_route(prefix + "/config", config, methods=["GET"])
        app.add_api_route(prefix + "/infer", infer, methods=["POST"])
        app.add_api_route(prefix + "/stats", statistics, methods=["GET"])


class _Families:
    """A Prometheus collector that yields metric families made elsewhere."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)
