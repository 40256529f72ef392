"""The same models and v2 routes as a Ray Serve deployment, for scale-out.

``V2Deployment`` is a Ray Serve ingress deployment (FastAPI) answering the same v2 routes as
the single-process server; each model gets its own ``@serve.batch`` queue with the model's
``max_batch_size`` (counted in rows, through ``batch_size_fn``) and ``max_queue_delay`` as
``batch_wait_timeout_s``. Note Ray's timeout counts from the FIRST request of a batch, so a
lone request waits the whole timeout; our batcher has the same rule (delay from the oldest).
``num_replicas`` copies run in parallel, on one machine or across a Ray cluster.

``run_ray_serve`` (``serve --ray``) starts a private local Ray (or joins ``--ray-address``)
with its temp folder in a fresh temporary directory and token authentication from an
in-memory token (``RAY_AUTH_TOKEN``, set by ``ray_env.private_ray_environment`` before
Ray is imported: Ray reads it at import), so nothing is written under the home folder or the
repository; on SIGTERM it shuts Serve and Ray down, which stops every process it started.
"""

import argparse
import logging
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve

from inference_pipeline.serving.models import Prepared, ServedModel, load_repository
from inference_pipeline.serving.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    encode_infer_response,
    parse_infer_request,
)

log = logging.getLogger("inference_pipeline.serving")
ingress = FastAPI(title="v2 inference on Ray Serve", openapi_url=None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _batched_runner(model: ServedModel):
    """One ``@serve.batch`` queue per model: items are Prepared requests."""
    settings = model.batching

    async def run(items: list[Prepared]) -> list[dict]:
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, model.run_batch, 0, [i.data for i in items])

    return serve.batch(
        run,
        max_batch_size=settings.max_batch_size,
        batch_wait_timeout_s=settings.max_queue_delay_us / 1e6,
        batch_size_fn=lambda items: sum(item.rows for item in items),
    )


@serve.deployment(max_ongoing_requests=256)
@serve.ingress(ingress)
class V2Deployment:
    """Every model of a repository behind the v2 routes, one batch queue per model."""

    def __init__(self, repository: str, overrides: dict, threads: int | None) -> None:
        overrides = dict(overrides, instance_count=1)  # Ray's replicas are the instances
        self.models = {m.name: m for m in load_repository(Path(repository), overrides, threads)}
        self.runners = {name: _batched_runner(m) for name, m in self.models.items()}
        self.types = {
            name: {s.name: s.datatype for s in m.outputs} for name, m in self.models.items()
        }

    def _model(self, name: str) -> ServedModel:
        if name not in self.models:
            raise ProtocolError(f"unknown model {name!r}", 404)
        return self.models[name]

    @ingress.get("/v2")
    async def server_metadata(self) -> dict:
        return {"name": "inference_pipeline-ray", "version": "1", "extensions": []}

    @ingress.get("/v2/health/live")
    async def live(self) -> dict:
        return {"live": True}

    @ingress.get("/v2/health/ready")
    async def ready(self) -> dict:
        return {"ready": True}

    @ingress.get("/v2/models/{name}")
    async def metadata(self, name: str) -> Response:
        try:
            return JSONResponse(self._model(name).metadata())
        except ProtocolError as exc:
            return _error(exc.status, str(exc))

    @ingress.get("/v2/models/{name}/ready")
    async def model_ready(self, name: str) -> Response:
        if name not in self.models:
            return _error(404, f"unknown model {name!r}")
        return JSONResponse({"name": name, "ready": True})

    @ingress.post("/v2/models/{name}/infer")
    async def infer(self, name: str, request: Request) -> Response:
        try:
            model = self._model(name)
            body = await request.body()
            specs = {spec.name: spec for spec in model.inputs}
            parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH), specs)
            try:
                prepared = model.prepare(parsed.inputs)
            except ValueError as exc:
                raise ProtocolError(str(exc)) from None
            limit = model.batching.max_batch_size
            if prepared.rows > limit:
                raise ProtocolError(
                    f"request has {prepared.rows} rows; this model takes 1 to {limit}"
                )
            outputs = await self.runners[name](prepared)
            payload, header_length = encode_infer_response(
                model.name, model.version, parsed, outputs, self.types[name]
            )
        except ProtocolError as exc:
            return _error(exc.status, str(exc))
        headers = {HEADER_LENGTH: str(header_length)} if header_length is not None else None
        return Response(payload, headers=headers, media_type="application/json")


def run_ray_serve(repository: str, overrides: dict, args: argparse.Namespace) -> int:
    """``serve --ray``: deploy on Ray Serve, serve until SIGTERM/SIGINT, then stop it all."""
    import ray

    stop = threading.Event()
    temp_dir = tempfile.mkdtemp(prefix="ray_") if args.ray_address is None else None
    try:
        if temp_dir is not None:
            ray.init(num_cpus=args.ray_cpus, include_dashboard=False, _temp_dir=temp_dir,
                     log_to_driver=False, configure_logging=False)  # fmt: skip
        else:
            ray.init(address=args.ray_address, log_to_driver=False, configure_logging=False)
        # after ray.init, which installs a SIGTERM handler that ends the process at once
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        serve.start(http_options={"host": args.host, "port": args.port})
        cpus = min(1.0, args.ray_cpus / args.replicas) if temp_dir else 1.0
        threads = args.threads or max(1, (os.cpu_count() or 1) // args.replicas)
        deployment = V2Deployment.options(
            num_replicas=args.replicas, ray_actor_options={"num_cpus": cpus}
        )
        serve.run(
            deployment.bind(str(Path(repository).resolve()), overrides, threads),
            name="v2",
            route_prefix="/",
            blocking=False,
        )
        log.info(
            "listening",
            extra={"url": f"http://{args.host}:{args.port}", "port": args.port, "ray": True,
                   "replicas": args.replicas, "ray_temp_dir": temp_dir},
        )  # fmt: skip
        while not stop.wait(0.5):  # a short wait keeps the signal handler responsive
            pass
        log.info("shutting down", extra={"ray": True})
    finally:
        try:
            if ray.is_initialized():
                serve.shutdown()
        finally:
            ray.shutdown()
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
    log.info("stopped", extra={"ray": True})
    return 0


def app_builder(args: dict) -> serve.Application:
    """Ray Serve application builder, for ``serve deploy`` / ``serve run`` of a config file.

    ``args``: ``repository`` (path on every node), optional ``overrides`` (batching settings
    by their BatchingSettings names), ``threads`` and ``num_replicas``.
    """
    unknown = set(args) - {"repository", "overrides", "threads", "num_replicas"}
    if unknown or "repository" not in args:
        raise ValueError(f"app_builder args: need 'repository'; unknown keys {sorted(unknown)}")
    deployment = V2Deployment.options(num_replicas=int(args.get("num_replicas", 1)))
    return deployment.bind(
        str(args["repository"]), dict(args.get("overrides") or {}), args.get("threads")
    )
