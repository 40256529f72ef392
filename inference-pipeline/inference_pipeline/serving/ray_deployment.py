"""The same models and the same v2 front end as a Ray Serve deployment, for scale-out.

``V2Deployment`` is a Ray Serve ingress deployment whose ASGI app is the one v2 front end,
``serving.app.InferenceServer``, built in each replica (``__serve_build_asgi_app__``): every
route, content type, status code, size limit and the dynamic batcher are the plain server's.
Ray runs the app's lifespan, so each replica starts its batchers and drains them when it
stops. ``num_replicas`` copies run in parallel, on one machine or across a Ray cluster; each
replica runs one instance per model (the replicas are the instances).

Statistics (``/v2/models/stats`` and the counters of ``/metrics``) are the sum over the
replicas: each replica sends its snapshot to one named actor, ``StatisticsCollector``, at most
every ``PUSH_INTERVAL_S`` while its counters change, and at once when it answers a statistics
or metrics request; the answer is the collector's sum. (The histograms of ``/metrics`` are the
answering replica's own.)

``run_ray_serve`` (``serve --ray``) starts a private local Ray (or joins ``--ray-address``)
with its temp folder in a fresh temporary directory and token authentication from an
in-memory token (``RAY_AUTH_TOKEN``, set by ``ray_env.private_ray_environment`` before
Ray is imported: Ray reads it at import), so nothing is written under the home folder or the
repository; on SIGTERM it shuts Serve and Ray down, which stops every process it started.
"""

import argparse
import asyncio
import logging
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import ray
from fastapi import FastAPI
from ray import serve

from inference_pipeline.serving.app import (
    DEFAULT_MAX_REQUEST_BYTES,
    InferenceServer,
    StatisticsView,
)
from inference_pipeline.serving.models import load_repository
from inference_pipeline.serving.statistics import merge

log = logging.getLogger("inference_pipeline.serving")
PUSH_INTERVAL_S = 0.25


@ray.remote(num_cpus=0)
class StatisticsCollector:
    """The latest statistics snapshot of every replica; ``total`` sums them."""

    def __init__(self) -> None:
        self.snapshots: dict[str, list[dict]] = {}

    def push(self, replica: str, snapshot: list[dict]) -> None:
        self.snapshots[replica] = snapshot

    def total(self) -> list[dict]:
        return merge(self.snapshots.values())


class ReplicaStatistics(StatisticsView):
    """This replica's share of the sum: pushes its snapshot, reads the collector's total."""

    def __init__(self, collector_name: str) -> None:
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.collector = StatisticsCollector.options(
            name=collector_name, get_if_exists=True, lifetime=None
        ).remote()
        self.server: InferenceServer | None = None
        self.task: asyncio.Task | None = None

    def local(self) -> list[dict]:
        return [entry.statistics.snapshot() for entry in self.server.entries.values()]

    async def push(self, snapshot: list[dict]) -> None:
        await self.collector.push.remote(self.replica, snapshot)

    async def push_while_changing(self) -> None:
        last = None
        while True:
            snapshot = self.local()
            if snapshot != last:
                await self.push(snapshot)
                last = snapshot
            await asyncio.sleep(PUSH_INTERVAL_S)

    async def start(self, server: InferenceServer) -> None:
        self.server = server
        self.task = asyncio.ensure_future(self.push_while_changing())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        try:
            await self.push(self.local())  # the drained batches count too
        except ray.exceptions.RayError:  # the collector went first (Ray is shutting down)
            pass

    async def gather(self, local: list[dict]) -> list[dict]:
        await self.push(local)
        return await self.collector.total.remote()


@serve.deployment(max_ongoing_requests=256)
@serve.ingress()
class V2Deployment:
    """Every model of a repository behind the one v2 front end, one batcher per model."""

    def __init__(
        self,
        repository: str,
        overrides: dict,
        threads: int | None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        overrides = dict(overrides, instance_count=1)  # Ray's replicas are the instances
        models = load_repository(Path(repository), overrides, threads)
        app_name = serve.get_replica_context().app_name
        view = ReplicaStatistics(f"v2_statistics_{app_name}")
        self.server = InferenceServer(models, max_request_bytes, statistics_view=view)

    def __serve_build_asgi_app__(self) -> FastAPI:
        """Ray Serve's ingress: the front end's app (Ray runs its lifespan)."""
        return self.server.app


def run_ray_serve(repository: str, overrides: dict, args: argparse.Namespace) -> int:
    """``serve --ray``: deploy on Ray Serve, serve until SIGTERM/SIGINT, then stop it all."""
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
        repository = str(Path(repository).resolve())
        serve.run(
            deployment.bind(repository, overrides, threads, args.max_request_bytes),
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
