"""Real artifacts shared by the whole pytest run (and by later runs: both live in the on-disk
cache, keyed by settings and code, so a second session reads them back).

- ``quick_build``: ``pipeline.build_cached(QUICK_BUILD)`` (``scenarios.quick_build``, one per
  process): a real fine-tune at quick settings, both exports, fusion, INT8 dynamic, static
  and NNCF quantization, FP16, every gate, the written repository. The offline tests'
  ``scenarios.quick_artifacts`` takes its exports from it, and ``tools/run_demo.py --quick``
  (the report test) reads the same cached build.
- ``quick_gpt``: the byte-level GPT trained for ``QUICK_GPT_STEPS`` steps and exported (FP32
  and its real INT8 graph).
- ``ray_serve``: ``serve --ray --replicas 2`` on the tiny repository, one per session (Ray
  takes about 10 s to start, and the machine holds one Ray cluster at a time): the protocol
  suite's Ray front end and the Ray test, which stops it and checks that nothing is left.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The GPT tests' step budget (about 45 s of one core): its cache-equality and INT8 gates pass.
QUICK_GPT_STEPS = 300


@pytest.fixture(scope="session")
def quick_build():
    from inference_pipeline_harness.scenarios import quick_build

    return quick_build()


@pytest.fixture(scope="session")
def quick_trained():
    """The quick build's fine-tuned classifier (from the cache the build filled)."""
    from inference_pipeline.model import load_or_train
    from inference_pipeline.pipeline import QUICK_BUILD

    return load_or_train(QUICK_BUILD.train, progress=lambda _: None)


@pytest.fixture(scope="session")
def quick_gpt():
    import torch
    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.train import TrainSettings

    threads = torch.get_num_threads()
    try:
        return load_artifacts(
            settings=TrainSettings(steps=QUICK_GPT_STEPS), progress=lambda _: None
        )
    finally:
        torch.set_num_threads(threads)  # training pins one thread


class RayServe:
    """``python -m inference_pipeline serve --ray --replicas 2`` in a subprocess, its output in
    ``log_path`` (the "listening" line names Ray's temp folder). :meth:`running` starts it
    when none is running, so the test that stops it need not run last; a server that failed
    to start or exited with an error is not started again (its log says why)."""

    def __init__(self, log_folder: Path) -> None:
        self.log_path = log_folder / "serve.log"
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.failed = ""  # why the last start failed
        # Ray writes no auth token under ~ (serving.ray_env): whether one existed before
        self.auth_token_existed = False

    def running(self) -> tuple[str, subprocess.Popen]:
        """(url, process) of the running server."""
        from inference_pipeline_harness.serving_fixtures import (
            MAX_REQUEST_BYTES,
            free_port,
            stop_gracefully,
            tiny_repository,
            wait_ready,
        )

        if self.process is not None and self.process.poll() is None:
            return self.url, self.process
        if self.process is not None and self.process.returncode != 0:
            self.failed = self.failed or f"exited with {self.process.returncode}"
        if self.failed:
            raise RuntimeError(f"the Ray server {self.failed}: see {self.log_path}")
        self.auth_token_existed = (Path.home() / ".ray" / "auth_token").exists()
        port = free_port()
        command = [sys.executable, "-m", "inference_pipeline", "serve", str(tiny_repository()),
                   "--ray", "--replicas", "2", "--port", str(port),
                   "--max-request-bytes", str(MAX_REQUEST_BYTES)]  # fmt: skip
        with self.log_path.open("w") as log_file:
            self.process = subprocess.Popen(command, stdout=log_file, stderr=log_file)
        self.url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(self.url, timeout_s=180, process=self.process)
        except (RuntimeError, TimeoutError) as exc:
            self.failed = f"did not start ({exc})"
            stop_gracefully(self.process, 60)
            raise
        return self.url, self.process


@pytest.fixture(scope="session")
def ray_serve(tmp_path_factory) -> Iterator[RayServe]:
    from inference_pipeline_harness.serving_fixtures import stop_gracefully

    server = RayServe(tmp_path_factory.mktemp("ray_serve"))
    try:
        yield server
    finally:
        if server.process is not None:
            stop_gracefully(server.process, 60)
