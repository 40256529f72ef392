"""Shared by the serving tests, demo and bench: a tiny model repository and server runners.

``build_tiny_repository`` writes a repository in the contract's layout (config.pbtxt,
tokenizer.json, labels.txt, 1/model.onnx with inputs input_ids/attention_mask and outputs
logits [-1, 5] / embedding [-1, 384]) from a small torch embedding + mean-pooling + linear
model, so serving can be tested in about a second without the real MiniLM repository.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

LABELS = ("business", "entertainment", "politics", "sport", "tech")
WORDS = (
    "the a of to in and for on is with market shares bank profit growth film music star award "
    "show album government minister election party vote law match team goal cup player season "
    "coach win league phone software computer internet users digital game mobile network data "
    "chip new says year first over after more than could would people said also two three "
    "record sales oil price deal court tax plans chief report world british uk us european"
).split()
TINY_MODEL = "tiny_text"
# The request-size limit the protocol tests give every front end: below serve's default
# (4 MiB), so that what refuses their 10 MB body is the limit they passed.
MAX_REQUEST_BYTES = 1024 * 1024
TINY_CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }}
]
output [
  {{ name: "logits" data_type: TYPE_FP32 dims: [ 5 ] }},
  {{ name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] }}
]
dynamic_batching {{
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: {delay_us}
  default_queue_policy {{ max_queue_size: {queue_size} allow_timeout_override: true }}
  priority_levels: 2
  default_priority_level: 2
}}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters {{ key: "max_sequence_length" value: {{ string_value: "128" }} }}
parameters {{ key: "tokenizer" value: {{ string_value: "tokenizer.json" }} }}
parameters {{ key: "labels" value: {{ string_value: "labels.txt" }} }}
"""


def _export_tiny_onnx(path: Path, vocab_size: int) -> None:
    import torch

    class TinyClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab_size, 32)
            self.project = torch.nn.Linear(32, 384)
            self.head = torch.nn.Linear(384, len(LABELS))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
            mask = attention_mask.unsqueeze(-1).to(torch.float32)
            pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            embedding = torch.tanh(self.project(pooled))
            return self.head(embedding), embedding

    torch.manual_seed(0)
    model = TinyClassifier().eval()
    ids = torch.randint(5, vocab_size, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # padded example, so the exporter cannot bake in "no padding"
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    axes |= {"logits": {0: "batch"}, "embedding": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, mask),
            str(path),
            dynamo=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits", "embedding"],
            dynamic_axes=axes,
        )


def _write_tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(path))
    return len(vocab)


def build_tiny_repository(
    out: Path,
    max_batch_size: int = 8,
    delay_us: int = 2000,
    queue_size: int = 64,
    instances: int = 1,
) -> Path:
    """Write ``out/<TINY_MODEL>/...`` (the contract's layout); returns ``out``."""
    folder = out / TINY_MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    vocab_size = _write_tokenizer(folder / "tokenizer.json")
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    _export_tiny_onnx(folder / "1" / "model.onnx", vocab_size)
    (folder / "config.pbtxt").write_text(
        TINY_CONFIG.format(
            name=TINY_MODEL,
            max_batch_size=max_batch_size,
            delay_us=delay_us,
            queue_size=queue_size,
            instances=instances,
        )
    )
    return out


_CACHE: dict[str, Path] = {}


def tiny_repository() -> Path:
    """One tiny repository per process (removed at exit): tests share it."""
    if "repo" not in _CACHE:
        root = Path(tempfile.mkdtemp(prefix="tiny_repo_"))
        atexit.register(shutil.rmtree, root, True)
        _CACHE["repo"] = build_tiny_repository(root)
    return _CACHE["repo"]


TINY_GPT = "tiny_gpt"


class CountingStep:
    """A fake GPT step for engine/route tests: the next byte is the last byte + 1 (outputs are
    predictable), and every pass sleeps ``pass_s`` (a floor under token latencies)."""

    def __init__(self, pass_s: float = 0.002, max_positions: int = 256) -> None:
        from inference_pipeline.generation.model import GPTConfig

        self.pass_s = pass_s
        self.config = GPTConfig(n_layer=1, n_head=1, d_model=2, max_positions=max_positions)

    def __call__(self, tokens, positions, attention_mask, past):
        import numpy as np

        time.sleep(self.pass_s)
        logits = np.zeros((*tokens.shape, 256), dtype=np.float32)
        np.put_along_axis(logits, ((tokens + 1) % 256)[..., None], 1.0, axis=-1)
        # the new tokens' keys/values, [B, H, T, D] each (what a step function returns)
        return logits, [
            np.zeros((*tokens.shape[:1], 1, tokens.shape[1], 2), np.float32) for _ in past
        ]


def build_tiny_generation_folder(repository: Path, max_batch: int = 4, max_queue: int = 4) -> Path:
    """``repository/tiny_gpt``: an untrained 2-layer GPT (TINY_CONFIG) exported with its KV
    cache explicit, in a generation model folder; returns the folder."""
    import torch
    from inference_pipeline.generation.export import export_onnx
    from inference_pipeline.generation.model import GPT
    from inference_pipeline.generation.model import TINY_CONFIG as GPT_TINY_CONFIG
    from inference_pipeline.generation.served import write_generation_folder

    torch.manual_seed(0)
    model = GPT(GPT_TINY_CONFIG).eval()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = export_onnx(model, Path(tmp) / "model.onnx")
        return write_generation_folder(
            repository, graph, GPT_TINY_CONFIG, TINY_GPT, max_batch, max_queue
        )


def tiny_repository_with_gpt() -> Path:
    """The tiny repository plus a tiny GPT folder, one per process (removed at exit)."""
    if "repo_gpt" not in _CACHE:
        root = Path(tempfile.mkdtemp(prefix="tiny_repo_gpt_"))
        atexit.register(shutil.rmtree, root, True)
        shutil.copytree(tiny_repository(), root, dirs_exist_ok=True)
        build_tiny_generation_folder(root)
        _CACHE["repo_gpt"] = root
    return _CACHE["repo_gpt"]


def sample_texts(count: int, seed: int = 0, max_words: int = 100) -> list[str]:
    """Texts of mixed lengths (1 to ``max_words`` words) from the tiny vocabulary."""
    import random

    rng = random.Random(seed)
    lengths = [rng.choice((1, 2, 3, 5, 8, 13, 30, 60, max_words)) for _ in range(count)]
    return [" ".join(rng.choice(WORDS) for _ in range(n)) for n in lengths]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, timeout_s: float = 30.0, process: subprocess.Popen | None = None) -> None:
    """Poll ``/v2/health/ready`` until 200 (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready after {timeout_s} s")


@contextlib.contextmanager
def threaded_server(
    models: list, max_request_bytes: int = 4 * 1024 * 1024, generation: tuple = ()
) -> Iterator[tuple]:
    """An in-process server on a free loopback port, in a thread; yields (url, server).

    It runs on ``serve``'s uvicorn subclass: ``server.app.state.http_server.handle_exit(
    signal.SIGTERM, None)`` is exactly what a SIGTERM to ``serve`` runs."""
    import uvicorn
    from inference_pipeline.serving.app import InferenceServer
    from inference_pipeline.serving.runner import DrainingServer, bind_socket

    server = InferenceServer(models, max_request_bytes, generation, drain_timeout_s=30.0)
    sock = bind_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        server.app,
        log_config=None,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=30,
    )
    runner = DrainingServer(config, server)
    server.app.state.http_server = runner
    thread = threading.Thread(target=runner.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_ready(url)
        yield url, server
    finally:
        runner.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextlib.contextmanager
def server_process(repository: Path, *extra: str, timeout_s: float = 60.0) -> Iterator[tuple]:
    """``python -m inference_pipeline serve`` in a subprocess on a free loopback port.

    Yields (url, process). On exit the process gets SIGTERM and is waited for (killed if it
    outlives ``timeout_s``), so no server is left behind.
    """
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "inference_pipeline", "serve", str(repository)]
    command += ["--port", str(port), *extra]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout_s, process)
        yield url, process
    finally:
        stop_gracefully(process, timeout_s)


def stop_gracefully(process: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM (the server drains), then SIGKILL if it outlives ``timeout_s``; waits either way."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class SlowModel:
    """A served model whose every batch takes ``seconds`` longer (a server of known, small
    capacity: a stand-in for a big model)."""

    def __init__(self, inner, seconds: float) -> None:
        self._inner, self._seconds = inner, seconds

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def run_batch(self, instance: int, batch: list) -> list:
        time.sleep(self._seconds)
        return self._inner.run_batch(instance, batch)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core machine: one torch thread avoids spin-waiting on a busy
    core (tests wrap it in an autouse fixture)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def infer_json(url: str, model: str, texts: list[str], timeout_s: float = 10.0, **params) -> tuple:
    """POST one JSON infer request with the stdlib; returns (status, decoded body)."""
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
    if params:
        body["parameters"] = params
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def metric(url: str, pattern: str) -> float:
    """The value of the first /metrics sample matching ``pattern`` (a regex), 0 if none."""
    import re

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(pattern + r" ([0-9.e+-]+)", text)
    return float(found.group(1)) if found else 0.0


def queue_size_metric(model: str) -> str:
    """The /metrics pattern of ``model``'s queue length."""
    return r'inference_queue_size\{model="' + model + r'"\}'


def wait_until(condition: Callable[[], object], what: str, limit_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds: a guard against a hang, not a speed requirement."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.01)


@dataclasses.dataclass
class DrainUnderLoad:
    """What a server process did with SIGTERM while requests were queued and more kept coming."""

    answers: list  # the queued requests' (status, body), in order
    background: list  # the load's answers, or the OSError name of a request never accepted
    exit_code: int
    events: list[str]  # the server's JSON log messages


def sigterm_under_load(
    url: str,
    process: subprocess.Popen,
    model: str,
    queued_texts: list[str],
    load_texts: list[str],
    *,
    loaders: int,
    load_requests: int,
    timeout_s: float,
) -> DrainUnderLoad:
    """Queue one request per ``queued_texts`` item, wait until the server's queue holds them
    all, start ``loaders`` clients that keep sending ``load_texts`` (at most ``load_requests``
    each), then SIGTERM the server and collect every outcome."""

    def post(text: str) -> tuple | str:
        try:
            return infer_json(url, model, [text], timeout_s)
        except OSError as exc:  # refused or reset: never accepted by the server
            return type(exc).__name__

    pool = concurrent.futures.ThreadPoolExecutor(len(queued_texts) + loaders)
    queued = [pool.submit(post, t) for t in queued_texts]
    wait_until(
        lambda: metric(url, queue_size_metric(model)) == len(queued_texts), "all requests queued"
    )
    stop = threading.Event()

    def keep_loading() -> list:
        results: list = []
        while not stop.is_set() and len(results) < load_requests:
            results.append(post(load_texts[len(results) % len(load_texts)]))
        return results

    load = [pool.submit(keep_loading) for _ in range(loaders)]
    process.send_signal(signal.SIGTERM)
    answers = [future.result(timeout=timeout_s) for future in queued]
    exit_code = process.wait(timeout=timeout_s)
    stop.set()
    background = [r for future in load for r in future.result(timeout=timeout_s)]
    pool.shutdown()
    lines = process.stderr.read().splitlines()
    events = [json.loads(line)["message"] for line in lines if line.startswith("{")]
    return DrainUnderLoad(answers, background, exit_code, events)


def accepted_or_refused_at_the_door(result: tuple | str) -> bool:
    """A request sent during a drain: answered, refused with 503 "shutting down", or never
    connected (the OSError's name)."""
    return (
        isinstance(result, str)
        or result[0] == 200
        or (result[0] == 503 and "shutting down" in result[1]["error"])
    )
