"""The GPT's generation routes mounted in the v2 server beside the classifier: one repository,
one process, the same /metrics, queue limit and SIGTERM drain (tiny untrained GPT, loopback)."""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import shutil
import signal
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import openai
import pytest
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.openai_routes import chat_prompt
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.served import load_generation_service
from inference_pipeline.generation.service import GenerationService, loop_waker
from inference_pipeline.serving.models import generation_folders, load_repository
from inference_pipeline_harness.serving_fixtures import (
    TINY_GPT,
    TINY_MODEL,
    CountingStep,
    infer_json,
    server_process,
    threaded_server,
    tiny_repository_with_gpt,
)

WAIT_S = 30.0  # guard for waits that end as soon as the condition holds (a loaded 2-core box)


class GatedStep:
    """The real step function behind a gate: while closed, the engine holds every running
    request at a token boundary, so queue states are set up without racing the model."""

    def __init__(self, step) -> None:
        self.step, self.config = step, step.config
        self.open = threading.Event()

    def __call__(self, *args):
        if not self.open.wait(WAIT_S):
            raise TimeoutError("gate left closed")
        return self.step(*args)


@pytest.fixture
def gated_server() -> Iterator[tuple]:
    """A fresh in-process server (the queue and the shutdown are per test)."""
    repo = tiny_repository_with_gpt()
    service = load_generation_service(generation_folders(repo)[0])
    gate = GatedStep(service.engine.step_fn)
    service.engine.step_fn = gate
    with threaded_server(load_repository(repo), generation=(service,)) as (url, server):
        try:
            yield url, server, service, gate
        finally:
            gate.open.set()


def post(url: str, path: str, body: object | bytes) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    return conn.getresponse()


def stream(url: str, prompt: str, max_tokens: int, model: str = TINY_GPT) -> list[dict]:
    body = {"text_input": prompt, "parameters": {"max_tokens": max_tokens}}
    response = post(url, f"/v2/models/{model}/generate_stream", body)
    raw = response.read().decode()
    if response.status != 200:
        return [{"status": response.status, **json.loads(raw)}]
    return [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: ")]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def get(url: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + path, timeout=WAIT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_serve_cli_exposes_classifier_and_generation_routes_and_exits_0_on_sigterm() -> None:
    with server_process(tiny_repository_with_gpt()) as (url, process):
        assert infer_json(url, TINY_MODEL, ["the bank said profit"])[0] == 200
        status, metadata = get(url, f"/v2/models/{TINY_GPT}")
        assert status == 200 and json.loads(metadata)["platform"] == "generation"
        assert get(url, f"/v2/models/{TINY_GPT}/ready")[0] == 200
        events = stream(url, "The bank", 12)
        assert [e["index"] for e in events] == list(range(len(events)))
        assert events[-1]["finish_reason"] == "length"
        answer = json.loads(post(url, f"/v2/models/{TINY_GPT}/generate", {
            "text_input": "The bank", "parameters": {"max_tokens": 12}}).read())  # fmt: skip
        # greedy: the stream and the one-shot answer are the same bytes
        assert answer["text_output"] == "".join(e["text_output"] for e in events)
        assert answer["generated_tokens"] == 12
        metrics = get(url, "/metrics")[1].decode()
        assert f'inference_requests_total{{model="{TINY_GPT}",status="success"}} 2.0' in metrics
        assert f'vllm:generation_tokens_total{{model_name="{TINY_GPT}"}} 24.0' in metrics
    assert process.returncode == 0


@pytest.mark.parametrize(
    ("body", "status", "phrase"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"text_input": 3}, 400, "text_input"),
        ({"text_input": "a", "parameters": {"max_tokens": 500}}, 400, "positions"),
        ({"text_input": "a", "parameters": {"max_tokens": 1.7}}, 400, "must be an integer"),
        ({"text_input": "a", "parameters": {"seed": "7"}}, 400, "must be an integer"),
        (b" " * (5 * 1024 * 1024), 413, "exceeds"),
    ],
)
def test_malformed_generation_requests_get_one_v2_error(gated_server, body, status, phrase):
    url, *_ = gated_server
    response = post(url, f"/v2/models/{TINY_GPT}/generate_stream", body)
    answer = json.loads(response.read())
    assert response.status == status and set(answer) == {"error"} and phrase in answer["error"]
    unknown = post(url, "/v2/models/nope/generate", {"text_input": "a"})
    assert unknown.status == 404 and "nope" in json.loads(unknown.read())["error"]


def test_burst_beyond_the_generation_queue_is_rejected_at_once_and_loses_no_stream(gated_server):
    url, _, service, gate = gated_server
    capacity = service.engine.max_queue + service.engine.scheduler.max_num_seqs  # + admitted
    burst = capacity + 4
    results: list[list[dict]] = []
    threads = [
        threading.Thread(target=lambda: results.append(stream(url, "Profit", 20)))
        for _ in range(burst)
    ]
    for thread in threads:
        thread.start()
    # Rejects are answered while the engine is frozen: they did not wait for capacity.
    wait_until(lambda: len(results) >= burst - capacity, "the rejects")
    assert get(url, "/v2/health/ready")[0] == 200
    early = list(results)  # what came back while no stream could have finished
    assert all(r[0].get("status") == 429 and "queue full" in r[0]["error"] for r in early)
    gate.open.set()
    for thread in threads:
        thread.join(WAIT_S)
    rejected = [r for r in results if r[0].get("status") == 429]
    answered = [r for r in results if r[0].get("status") != 429]
    assert len(answered) + len(rejected) == burst and len(answered) >= service.engine.max_queue
    assert all(r[-1]["finish_reason"] == "length" for r in answered)
    cache = service.engine.cache
    wait_until(lambda: cache.free_blocks == cache.num_blocks, "every block back")
    # the queue gauge follows the queue back to empty (not frozen at the last submit's depth)
    assert (
        f'vllm:num_requests_waiting{{model_name="{TINY_GPT}"}} 0.0'
        in get(url, "/metrics")[1].decode()
    )


def test_sigterm_finishes_accepted_streams_and_refuses_new_ones(gated_server):
    url, server, service, gate = gated_server
    results: list[list[dict]] = []
    threads = [
        threading.Thread(target=lambda: results.append(stream(url, "Election", 30)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(service.engine.running) + service.engine.queue_depth() == 3, "3 in")
    server.app.state.http_server.handle_exit(signal.SIGTERM, None)  # what SIGTERM runs
    wait_until(lambda: not service.accepting, "intake closed")
    try:
        late = stream(url, "Late", 5)
        assert late[0]["status"] == 503, late
    except ConnectionError:
        pass  # uvicorn had already closed its listener: refused is the other correct answer
    gate.open.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert len(results) == 3
    # every accepted stream ran to its end: 30 token events and the closing one
    assert all(len(r) == 31 and r[-1]["finish_reason"] == "length" for r in results)
    wait_until(lambda: not service.runner._thread.is_alive(), "the engine thread to stop")


def test_waiting_streams_park_no_thread(gated_server):
    """A stream waits for its next token on the event loop, not in a worker thread: with a
    thread per stream the default executor (cpu_count + 4 threads) caps concurrent streams."""
    url, _, service, gate = gated_server
    before = {t.name for t in threading.enumerate()}
    clients = service.engine.max_queue  # all accepted, however admission interleaves
    results: list[list[dict]] = []
    threads = [
        threading.Thread(target=lambda: results.append(stream(url, "Tax", 5)), name=f"client{i}")
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    engine = service.engine
    wait_until(lambda: len(engine.running) + engine.queue_depth() == clients, "streams in")

    # every waiting stream has checked its client twice: each would have borrowed a thread
    # by now if waiting took one
    def polled_twice() -> bool:
        checks = dict(service.disconnect_checks)  # written on the server's event loop
        return len(checks) == clients and min(checks.values()) >= 2

    wait_until(polled_twice, "two disconnect checks per stream")
    added = {t.name for t in threading.enumerate()} - before - {t.name for t in threads}
    assert len(added) < clients, f"threads started while {clients} streams waited: {added}"
    gate.open.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert len(results) == clients and all(r[-1]["finish_reason"] == "length" for r in results)


def test_one_loop_wakeup_sets_every_stream_an_iteration_woke() -> None:
    """The engine wakes 16 streams after one iteration: one callback on their event loop sets
    the 16 events (one write to the loop's self-pipe, not 16); a wake after that callback ran
    schedules the next one."""
    loop = asyncio.new_event_loop()
    try:
        waker = loop_waker(loop)
        assert loop_waker(loop) is waker  # one per loop
        events = [asyncio.Event() for _ in range(16)]
        engine_thread = threading.Thread(target=lambda: [waker.wake(e) for e in events])
        engine_thread.start()
        engine_thread.join(WAIT_S)
        assert waker.wakeups == 1 and not any(e.is_set() for e in events)
        loop.run_until_complete(asyncio.sleep(0))  # the loop runs the callback
        assert all(e.is_set() for e in events)
        late = asyncio.Event()
        waker.wake(late)
        assert waker.wakeups == 2 and not late.is_set()
        loop.run_until_complete(asyncio.sleep(0))
        assert late.is_set()
    finally:
        loop.close()


def test_serve_refuses_what_it_cannot_serve_in_one_line(capsys) -> None:
    from inference_pipeline.__main__ import main

    repo = tiny_repository_with_gpt()
    assert main(["serve", str(repo), "--ray"]) == 2  # before any Ray process starts
    assert main(["serve", str(repo), "--generation", str(repo / TINY_MODEL)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in errors if line.startswith("error:")]
    assert len(errors) == 2
    assert "served by the v2 server only" in errors[0]
    assert TINY_MODEL in errors[1] and "not a generation model config" in errors[1]


def test_one_shot_generate_stops_when_its_client_leaves_while_tokens_flow() -> None:
    """/generate sends nothing until the end, so only a periodic check can see the client go;
    it must run while tokens keep coming (not only when the engine is idle)."""
    step = CountingStep(pass_s=0.02)  # a token every 20 ms: the engine is never idle
    service = GenerationService(ContinuousBatchingEngine(step, max_num_seqs=2), "cnt")
    with threaded_server([], generation=(service,)) as (url, _):
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
        body = json.dumps({"text_input": "a", "parameters": {"max_tokens": 200}})  # 4 s
        conn.request("POST", "/v2/models/cnt/generate", body, {"Content-Type": "application/json"})
        wait_until(lambda: service.engine.stats.generated_tokens >= 5, "tokens flowing")
        conn.close()  # walk away
        wait_until(lambda: not service.engine.running, "the request to end")
    assert service.engine.stats.generated_tokens < 200  # cancelled, not run to max_tokens
    assert service.engine.cache.free_blocks == service.engine.cache.num_blocks


# ---- the OpenAI-compatible routes, driven by the official client ---------------------------


@pytest.fixture(scope="module")
def openai_server() -> Iterator[tuple[str, GenerationService, ContinuousBatchingEngine]]:
    """The tiny GPT folder served in process, and a second engine over the same graph: the
    oracle for 'the engine's own greedy output'."""
    folder = generation_folders(tiny_repository_with_gpt())[0]
    service = load_generation_service(folder)
    oracle = load_generation_service(folder).engine
    with threaded_server([], generation=(service,)) as (url, _):
        yield url, service, oracle


def engine_greedy(engine: ContinuousBatchingEngine, prompt: bytes, max_tokens: int, stop=()):
    handle = engine.submit(GenerationRequest(prompt, max_tokens, tuple(stop)))
    engine.run_until_idle()
    return handle


def test_openai_client_completions_stream_and_not_equal_the_engines_greedy_output(openai_server):
    url, _, oracle = openai_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [TINY_GPT]
    prompt = "The Bank of England said"
    expected = engine_greedy(oracle, prompt.encode(), 20)
    text = bytes(expected.output).decode("utf-8", "replace")
    answer = client.completions.create(model=TINY_GPT, prompt=prompt, max_tokens=20, temperature=0)
    assert answer.choices[0].text == text and answer.choices[0].finish_reason == "length"
    assert answer.object == "text_completion" and answer.model == TINY_GPT
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt), 20)
    assert answer.usage.total_tokens == len(prompt) + 20
    chunks = list(
        client.completions.create(
            model=TINY_GPT, prompt=prompt, max_tokens=20, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert all(c.usage is None for c in chunks[:-1])


def test_openai_client_chat_completions_use_the_declared_template(openai_server):
    url, _, oracle = openai_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    messages = [
        {"role": "system", "content": "You write news."},
        {"role": "user", "content": "Rates"},
    ]
    rendered = b"<|system|>\nYou write news.\n<|user|>\nRates\n<|assistant|>\n"
    assert chat_prompt(messages).encode() == rendered
    expected = engine_greedy(oracle, rendered, 16, stop=(b"\n<|",))
    text = bytes(expected.output).decode("utf-8", "replace")
    answer = client.chat.completions.create(
        model=TINY_GPT, messages=messages, max_tokens=16, temperature=0
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == text
    assert choice.finish_reason == expected.finish_reason
    assert answer.usage.prompt_tokens == len(rendered)
    assert answer.usage.completion_tokens == len(expected.tokens)
    stream = client.chat.completions.create(
        model=TINY_GPT, messages=messages, max_tokens=16, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == expected.finish_reason


def test_openai_bad_requests_get_openais_error_shape(openai_server):
    url, service, _ = openai_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="a", max_tokens=2)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model=TINY_GPT, prompt="a", max_tokens=500)
    assert "positions" in too_long.value.body["message"]
    with pytest.raises(openai.BadRequestError) as two:
        client.completions.create(model=TINY_GPT, prompt="a", n=2)
    assert two.value.body["param"] == "n"
    for body in (
        {"model": TINY_GPT, "prompt": "a", "temperature": "hot"},
        {"model": TINY_GPT, "prompt": "a", "max_tokens": 0},
        {"model": TINY_GPT, "prompt": "a", "frobnicate": 1},
        {"model": TINY_GPT, "prompt": ""},
        {"model": TINY_GPT, "prompt": "a", "stream_options": {"include_usage": True}},
        {"prompt": "a"},
        b"{not json",
    ):
        response = post(url, "/v1/completions", body)
        answer = json.loads(response.read())
        assert response.status == 400, answer
        assert set(answer) == {"error"}
        assert set(answer["error"]) == {"message", "type", "param", "code"}
        assert answer["error"]["type"] == "invalid_request_error"
    response = post(url, "/v1/chat/completions", {"model": TINY_GPT, "messages": [{"role": "x"}]})
    assert response.status == 400 and json.loads(response.read())["error"]["param"]


def test_openai_raw_sse_stream_ends_with_done_and_logprobs_match(openai_server):
    url, _, oracle = openai_server
    body = {
        "model": TINY_GPT, "prompt": "Shares", "max_tokens": 8, "temperature": 0,
        "stream": True, "logprobs": 2,
    }  # fmt: skip
    response = post(url, "/v1/completions", body)
    assert response.status == 200
    assert response.getheader("content-type").startswith("text/event-stream")
    raw = response.read().decode()
    events = [line[len("data: ") :] for line in raw.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and raw.endswith("data: [DONE]\n\n")
    chunks = [json.loads(e) for e in events[:-1]]
    tokens = [t for c in chunks for t in c["choices"][0]["logprobs"]["token_logprobs"]]
    expected = engine_greedy(oracle, b"Shares", 8)
    assert len(tokens) == 8
    tops = [t for c in chunks for t in c["choices"][0]["logprobs"]["top_logprobs"]]
    for token, logprob, top in zip(expected.tokens, tokens, tops, strict=True):
        # greedy: the chosen byte is the most likely one, so it heads its top list
        best, value = next(iter(top.items()))
        assert best in (chr(token), f"bytes:\\x{token:02x}") and value == pytest.approx(logprob)
        assert logprob <= 0 and sum(math.exp(v) for v in top.values()) <= 1 + 1e-9


def test_openai_queue_full_is_429_with_retry_after(gated_server):
    url, _, service, gate = gated_server
    body = {"model": TINY_GPT, "prompt": "a", "max_tokens": 3, "stream": True}
    held = [post(url, "/v1/completions", body)]
    wait_until(lambda: len(service.engine.running) == 1, "one admitted (held at the gate)")
    held += [post(url, "/v1/completions", body) for _ in range(service.engine.max_queue)]
    wait_until(
        lambda: service.engine.queue_depth() == service.engine.max_queue, "the queue to fill"
    )
    refused = post(url, "/v1/completions", body)
    answer = json.loads(refused.read())
    assert refused.status == 429 and refused.getheader("retry-after") == "1"
    assert answer["error"]["code"] == "rate_limit_exceeded"
    gate.open.set()
    for response in held:
        assert response.status == 200 and response.read().endswith(b"data: [DONE]\n\n")


def test_scheduler_knobs_come_from_the_folder_and_the_command_line(capsys, tmp_path) -> None:
    from inference_pipeline.__main__ import main
    from inference_pipeline.generation.engine import (
        DEFAULT_ADMISSION_DELAY_FACTOR,
        DEFAULT_MAX_NUM_BATCHED_TOKENS,
    )

    repo = tiny_repository_with_gpt()
    folder = generation_folders(repo)[0]
    configured = load_generation_service(folder).engine.scheduler
    assert configured.max_num_seqs == 4  # the folder's max_batch_size
    assert configured.max_num_batched_tokens == DEFAULT_MAX_NUM_BATCHED_TOKENS
    assert configured.admission_delay_factor == DEFAULT_ADMISSION_DELAY_FACTOR
    flags = load_generation_service(
        folder, max_num_seqs=3, max_num_batched_tokens=40, admission_delay_factor=2.5
    ).engine.scheduler
    assert (flags.max_num_seqs, flags.max_num_batched_tokens, flags.admission_delay_factor) == (
        3,
        40,
        2.5,
    )
    # the folder's own value is read (a copy of the folder with the factor at 1.5)
    config = folder / "config.pbtxt"
    text = config.read_text()
    assert f'string_value: "{float(DEFAULT_ADMISSION_DELAY_FACTOR)!r}"' in text
    delayed = tmp_path / "delayed"
    shutil.copytree(folder, delayed)
    (delayed / "config.pbtxt").write_text(
        text.replace(f'"{float(DEFAULT_ADMISSION_DELAY_FACTOR)!r}"', '"1.5"')
    )
    assert load_generation_service(delayed).engine.scheduler.admission_delay_factor == 1.5
    # a budget below the running cap cannot fit every decode: one line, exit 2, no server
    assert main(["serve", str(repo), "--max-num-seqs", "8", "--max-num-batched-tokens", "4"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "max_num_batched_tokens >= max_num_seqs" in errors[0]
    assert main(["serve", str(repo), "--admission-delay-factor", "-1"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "admission_delay_factor >= 0" in errors[0]
