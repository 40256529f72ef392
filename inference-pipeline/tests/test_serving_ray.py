"""Scale-out on Ray Serve: `serve --ray` answers the same v2 routes, then leaves nothing behind.

The server is the session's (conftest's ``ray_serve``: a local Ray, num_cpus=2, two replicas,
in a subprocess), which the protocol suite serves from too; this test stops it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton
from inference_pipeline.serving.models import load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_MODEL,
    infer_json,
    sample_texts,
    stop_gracefully,
    tiny_repository,
)


def processes_mentioning(text: str) -> set[int]:
    """PIDs whose command line contains ``text`` (Ray's processes name their temp folder)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def wait_for_log(path: Path, marker: str, deadline_s: float) -> dict:
    """The first JSON log line containing ``marker`` (polled, bounded)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            if line.startswith("{") and marker in line:
                return json.loads(line)
        time.sleep(0.1)
    raise TimeoutError(f"no {marker} line in {path}")


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def test_ray_serve_answers_v2_and_stops_every_process_it_started(ray_serve):
    (model,) = load_repository(tiny_repository())
    token_file = Path.home() / ".ray" / "auth_token"
    url, process = ray_serve.running()
    started: set[int] = set()
    try:
        listening = wait_for_log(ray_serve.log_path, '"listening"', deadline_s=60)
        started = descendants(process.pid) | processes_mentioning(listening["ray_temp_dir"])
        assert started, "Ray started no process?"

        client = triton.InferenceServerClient(url.removeprefix("http://"))
        texts = sample_texts(4, seed=11)
        text_input = triton.InferInput("TEXT", [len(texts)], "BYTES")
        text_input.set_data_from_numpy(np.array(texts, dtype=object), binary_data=False)
        outputs = [triton.InferRequestedOutput(n, binary_data=False) for n in ("logits", "label")]
        result = client.infer(TINY_MODEL, [text_input], outputs=outputs)
        for row, text in enumerate(texts):
            prepared = model.prepare({"TEXT": np.array([text], dtype=object)})
            alone = model.run_batch(0, [prepared.data])[0]["logits"][0]
            np.testing.assert_allclose(result.as_numpy("logits")[row], alone, atol=1e-4)
        assert client.get_model_metadata(TINY_MODEL)["inputs"][0]["name"] == "TEXT"
        client.close()
        status, answer = infer_json(url, "nope", ["x"])
        assert status == 404 and answer == {"error": "unknown model 'nope'"}
        status, answer = infer_json(url, TINY_MODEL, ["film"] * 9)  # max_batch_size is 8
        assert status == 400 and "rows" in answer["error"]

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0
        deadline = time.monotonic() + 20
        while alive(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(started), f"left behind: {sorted(alive(started))}"
        assert not Path(listening["ray_temp_dir"]).exists()
        assert token_file.exists() == ray_serve.auth_token_existed  # none written under ~
    finally:
        if process.poll() is None:  # a failed assertion: stop it the graceful way first
            started |= descendants(process.pid)
            stop_gracefully(process, 60)
        for pid in alive(started):  # only what this test started, by id
            os.kill(pid, signal.SIGKILL)


# importing ray.serve raises pydantic-v1-style deprecation warnings inside Ray itself
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_serve_deploy_config_builds_the_same_deployment():
    import yaml
    from inference_pipeline.serving import ray_deployment
    from ray import serve

    config_path = Path(__file__).parents[1] / "deploy" / "ray_serve_config.yaml"
    (application,) = yaml.safe_load(config_path.read_text())["applications"]
    module, _, builder = application["import_path"].partition(":")
    assert module == ray_deployment.__name__
    args = dict(application["args"], repository=str(tiny_repository()))
    built = getattr(ray_deployment, builder)(args)
    assert isinstance(built, serve.Application)
    with pytest.raises(ValueError, match="repository"):
        ray_deployment.app_builder({"num_replicas": 2})
