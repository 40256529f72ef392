"""OpenAI-compatible routes for the generation engines, so the clients and benchmark tools that
speak the OpenAI API (the ``openai`` package, vLLM's ``benchmark_serving``, genai-perf) drive
our GPT unchanged:

``GET  /v1/models``            every served generation model
``POST /v1/completions``       ``prompt`` -> ``choices[0].text``
``POST /v1/chat/completions``  ``messages`` rendered by :data:`CHAT_TEMPLATE` -> ``message``

Parameters: ``model`` (required), ``max_tokens`` (``max_completion_tokens`` in chat),
``temperature`` (default 1, as OpenAI's), ``top_p``, ``top_k`` (an extra, as in vLLM),
``seed``, ``stop`` (a string or up to 4), ``n`` (1 only), ``stream``,
``stream_options.include_usage``, ``logprobs`` (completions: 0..5 alternatives; chat:
``logprobs: true`` and ``top_logprobs`` 0..20). A parameter we do not implement is refused
with 400 rather than silently ignored (``echo``, ``best_of`` > 1, penalties, ``logit_bias``,
``suffix``, ``tools``...). The vocabulary is bytes, so a prompt may also be a list of byte ids.

Streaming is Server-Sent Events: one ``data: {chunk}`` per decoded piece, a last chunk with
``finish_reason``, with ``include_usage`` one more chunk with ``choices: []`` and ``usage``,
then ``data: [DONE]``. ``usage.completion_tokens`` counts every generated token, a matched
stop sequence's included (it was computed; it is not returned). Errors have OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``: 400 ``invalid_request_error``,
404 ``model_not_found``, 413 body too large, 429 queue full with ``Retry-After``, 503
shutting down, 500 the model failed. A client that disconnects cancels its request.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from inference_pipeline.generation.requests import (
    MAX_LOGPROBS,
    GenerationRequest,
    RequestHandle,
    TokenLogprob,
)
from inference_pipeline.generation.sampling import SamplingParams
from inference_pipeline.generation.service import (
    GenerationError,
    GenerationService,
    read_json,
    retry_after,
    stream_chunks,
    submit,
)

router = APIRouter()

# The chat template of our byte-level model. It was trained on news text only, so no template
# is "native": this one is declared, documented (GENERATION.md) and plain bytes. Each message is
# ``<|role|>\n`` + content + ``\n``; the prompt ends with ``<|assistant|>\n``; the answer ends
# where the model opens the next turn (the stop sequence ``CHAT_TURN_END``, never returned).
CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
CHAT_GENERATION_PROMPT = "<|assistant|>\n"
CHAT_TURN_END = "\n<|"
CHAT_ROLES = {"system", "developer", "user", "assistant"}

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_STOP_SEQUENCES = 4
MAX_COMPLETION_LOGPROBS = 5
# Accepted, with the values that mean "feature off"; any other value is refused.
NEUTRAL = {
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "echo": (False,),
    "best_of": (1,),
    "logit_bias": ({},),
    "suffix": ("",),
    "parallel_tool_calls": (False, True),
    "store": (False,),
}
COMMON_FIELDS = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream",
    "stream_options", "user", *NEUTRAL,
}  # fmt: skip
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "logprobs"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}


def chat_prompt(messages: list[dict[str, str]]) -> str:
    """The declared chat template applied to validated messages."""
    turns = [CHAT_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages]
    return "".join(turns) + CHAT_GENERATION_PROMPT


def _invalid(message: str, param: str | None = None) -> GenerationError:
    return GenerationError(400, message, param)


def _integer(body: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):  # int() would turn 1.7 into 1
        raise _invalid(f"'{name}' must be an integer, got {value!r}", name)
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise _invalid(f"'{name}' must be {bound}, got {value}", name)
    return value


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _invalid(f"'{name}' must be a number, got {value!r}", name)
    if not low <= value <= high:
        raise _invalid(f"'{name}' must be in [{low}, {high}], got {value}", name)
    return float(value)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(f"'{name}' must be a boolean, got {value!r}", name)
    return value


def _common(body: Any, fields: set[str]) -> dict[str, Any]:
    """Checks shared by both routes; returns the engine-side settings."""
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise _invalid(f"unrecognized request argument: {', '.join(unknown)}", unknown[0])
    if not isinstance(body.get("model"), str):
        raise _invalid("'model' is required (a string; GET /v1/models lists them)", "model")
    for name, neutral in NEUTRAL.items():
        if name in body and body[name] is not None and body[name] not in neutral:
            raise _invalid(f"'{name}' = {body[name]!r} is not supported by this server", name)
    if _integer(body, "n", 1) not in (None, 1):
        raise _invalid("only n = 1 is supported", "n")
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise _invalid("'stop' must be a non-empty string or a list of them", "stop")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise _invalid(f"at most {MAX_STOP_SEQUENCES} stop sequences", "stop")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _invalid("'stream_options' is only allowed with stream = true", "stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise _invalid("'stream_options' takes only include_usage", "stream_options")
        include_usage = _flag(options, "include_usage")
    top_k = _integer(body, "top_k", -1)
    try:
        sampling = SamplingParams(
            _number(body, "temperature", 1.0, 0.0, 2.0),
            0 if top_k in (None, -1) else top_k,  # -1 (vLLM) and absent: no cut
            _number(body, "top_p", 1.0, 0.0, 1.0),
            _integer(body, "seed", 0, 2**64 - 1),
        )
    except ValueError as exc:
        raise _invalid(str(exc)) from None
    return {
        "model": body["model"], "stop": tuple(s.encode() for s in stop), "stream": stream,
        "include_usage": include_usage, "sampling": sampling,
    }  # fmt: skip


def _completion_prompt(body: dict) -> bytes:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        data = prompt.encode("utf-8")
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 256 for t in prompt)
    ):
        data = bytes(prompt)  # token ids: our tokens are bytes
    else:
        raise _invalid(
            "'prompt' must be a string, or a list of byte ids 0..255 (one prompt per request)",
            "prompt",
        )
    if not data:
        raise _invalid("'prompt' must not be empty", "prompt")
    return data


def _chat_messages(body: dict) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list", "messages")
    rendered = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
            raise _invalid(
                f"messages[{i}] needs a role in {sorted(CHAT_ROLES)}", f"messages[{i}].role"
            )
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise _invalid(f"messages[{i}]: only text content parts", f"messages[{i}]")
            content = "".join(str(p.get("text", "")) for p in content)
        if not isinstance(content, str):
            raise _invalid(f"messages[{i}].content must be a string", f"messages[{i}].content")
        role = "system" if message["role"] == "developer" else message["role"]
        rendered.append({"role": role, "content": content})
    return rendered


def _token_text(token: int) -> str:
    """A byte token as OpenAI spells tokens that are not text on their own."""
    return chr(token) if token < 128 else f"bytes:\\x{token:02x}"


def _error_body(exc: GenerationError) -> dict[str, Any]:
    kind, code = {
        400: ("invalid_request_error", None),
        404: ("invalid_request_error", "model_not_found"),
        413: ("invalid_request_error", "request_too_large"),
        429: ("rate_limit_error", "rate_limit_exceeded"),
        503: ("server_error", "service_unavailable"),
    }.get(exc.status, ("server_error", None))
    return {"error": {"message": str(exc), "type": kind, "param": exc.param, "code": code}}


def error_response(exc: GenerationError) -> JSONResponse:
    return JSONResponse(_error_body(exc), status_code=exc.status, headers=retry_after(exc))


def _services(request: Request) -> dict[str, GenerationService]:
    return getattr(request.app.state, "generation", {})


@router.get("/v1/models")
async def list_models(request: Request) -> JSONResponse:
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "inference_pipeline",
         "max_model_len": service.engine.config.max_positions}
        for name, service in _services(request).items()
    ]  # fmt: skip
    return JSONResponse({"object": "list", "data": data})


class _Call:
    """One accepted request: its service, handle and the answer's fixed fields."""

    def __init__(self, service: GenerationService, handle: RequestHandle, kind: str) -> None:
        self.service, self.handle, self.kind = service, handle, kind
        self.id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def envelope(self, streaming: bool) -> dict[str, Any]:
        obj = {"chat": "chat.completion", "text": "text_completion"}[self.kind]
        if streaming and self.kind == "chat":
            obj = "chat.completion.chunk"
        return {"id": self.id, "object": obj, "created": self.created,
                "model": self.service.model_name}  # fmt: skip

    def usage(self) -> dict[str, int]:
        prompt, completion = len(self.handle.request.prompt), len(self.handle.tokens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def logprobs(self, start: int, end: int, text_offset: int) -> dict[str, Any] | None:
        """The logprobs object of output tokens ``start:end`` (OpenAI's shape per route)."""
        request = self.handle.request
        if request.logprobs is None:
            return None
        tokens = self.handle.tokens[start:end]
        scored: list[TokenLogprob] = self.handle.logprobs[start:end]
        if self.kind == "chat":
            content = [
                {"token": _token_text(t), "logprob": s.logprob, "bytes": [t],
                 "top_logprobs": [{"token": _token_text(k), "logprob": v, "bytes": [k]}
                                  for k, v in s.top.items()]}
                for t, s in zip(tokens, scored, strict=True)
            ]  # fmt: skip
            return {"content": content}
        return {
            "tokens": [_token_text(t) for t in tokens],
            "token_logprobs": [s.logprob for s in scored],
            "top_logprobs": [{_token_text(k): v for k, v in s.top.items()} for s in scored],
            "text_offset": list(range(text_offset, text_offset + len(tokens))),
        }

    def choice(self, text: str, finish: str | None, logprobs: Any, first: bool) -> dict:
        if self.kind == "text":
            return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": logprobs, "finish_reason": finish}  # fmt: skip

    def delta(self, text: str, finish: str | None, logprobs: Any, first: bool) -> dict:
        if self.kind == "text":
            return self.choice(text, finish, logprobs, first)
        delta: dict[str, str] = {"role": "assistant"} if first else {}
        if text or (first and finish is None):
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}


async def _accept(
    request: Request, fields: set[str], build: Callable[[dict, dict, int], GenerationRequest]
) -> tuple[GenerationService | None, GenerationRequest | None, dict, GenerationError | None]:
    """Parse and validate; (service, request, settings, refusal)."""
    services = _services(request)
    limit = max((s.max_request_bytes for s in services.values()), default=1024 * 1024)
    service = None
    try:
        body = await read_json(request, limit)
        settings = _common(body, fields)
        service = services.get(settings["model"])
        if service is None:
            raise GenerationError(
                404, f"the model {settings['model']!r} does not exist (GET /v1/models)", "model"
            )
        context = service.engine.config.max_positions
        return service, build(body, settings, context), settings, None
    except GenerationError as exc:
        if service is not None:
            service.refused(exc)
        return service, None, {}, exc
    except ValueError as exc:  # GenerationRequest's own checks
        refusal = _invalid(str(exc))
        if service is not None:
            service.refused(refusal)
        return service, None, {}, refusal


def _build_completion(body: dict, settings: dict, context: int) -> GenerationRequest:
    prompt = _completion_prompt(body)
    max_tokens = _integer(body, "max_tokens", 1)
    logprobs = _integer(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    return GenerationRequest(
        prompt,
        COMPLETION_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        settings["stop"],
        settings["sampling"],
        logprobs,
    )


def _build_chat(body: dict, settings: dict, context: int) -> GenerationRequest:
    prompt = chat_prompt(_chat_messages(body)).encode("utf-8")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    if max_tokens is None:  # the rest of the context, as vLLM does
        max_tokens = max(1, context - len(prompt))
    logprobs = None
    if _flag(body, "logprobs"):
        logprobs = _integer(body, "top_logprobs", 0, MAX_LOGPROBS) or 0
    elif body.get("top_logprobs") is not None:
        raise _invalid("'top_logprobs' needs logprobs = true", "top_logprobs")
    stop = (*settings["stop"], CHAT_TURN_END.encode())
    return GenerationRequest(prompt, max_tokens, stop, settings["sampling"], logprobs)


async def _respond(request: Request, kind: str, fields: set[str], build) -> Response:
    service, generation_request, settings, refusal = await _accept(request, fields, build)
    if refusal is None:
        try:
            handle = submit(service, generation_request)
        except GenerationError as exc:
            service.refused(exc)
            refusal = exc
    if refusal is not None:
        return error_response(refusal)
    call = _Call(service, handle, kind)
    if settings["stream"]:
        return StreamingResponse(
            _events(call, request, settings["include_usage"]), media_type="text/event-stream"
        )
    async for _ in stream_chunks(service, handle, request):
        pass
    if handle.finish_reason == "error":
        return error_response(GenerationError(500, "generation failed in the model"))
    if handle.finish_reason == "cancelled":
        return Response(status_code=499)  # the client left: nobody reads this
    text = handle.output.decode("utf-8", "replace")
    answer = call.envelope(streaming=False)
    logprobs = call.logprobs(0, len(handle.output), 0)
    answer["choices"] = [call.choice(text, handle.finish_reason, logprobs, True)]
    answer["usage"] = call.usage()
    return JSONResponse(answer)


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n"


def _piece_template(call: _Call, usage: dict[str, Any]) -> tuple[str, str]:
    """The text around the piece in a plain middle chunk (no logprobs, not first, not last):
    one event per token is the server's hot loop, so only the piece is JSON-encoded there."""
    event = call.envelope(streaming=True)
    event["choices"] = [call.delta("\x00", None, None, first=False)]
    head, tail = json.dumps(event | usage).split('"\\u0000"')
    return f"data: {head}", f"{tail}\n\n"


async def _events(call: _Call, request: Request, include_usage: bool) -> AsyncIterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a byte may split a character
    sent, first = 0, True
    usage: dict[str, Any] = {"usage": None} if include_usage else {}
    head, tail = _piece_template(call, usage)
    plain = call.handle.request.logprobs is None
    async for chunk in stream_chunks(call.service, call.handle, request):
        if plain and not first and chunk.finish_reason is None:
            text = decoder.decode(chunk.data)
            if text:
                yield f"{head}{json.dumps(text)}{tail}"
            continue
        if chunk.finish_reason == "error":
            yield _sse(_error_body(GenerationError(500, "generation failed in the model")))
            break
        if chunk.finish_reason == "cancelled":
            return
        final = chunk.finish_reason is not None
        text = decoder.decode(chunk.data, final=final)
        logprobs = call.logprobs(sent, sent + len(chunk.data), sent)
        sent += len(chunk.data)
        if text or final or first or logprobs:
            event = call.envelope(streaming=True)
            event["choices"] = [call.delta(text, chunk.finish_reason, logprobs, first)]
            yield _sse(event | usage)
            first = False
    else:
        if include_usage:
            event = call.envelope(streaming=True)
            event["choices"], event["usage"] = [], call.usage()
            yield _sse(event)
    yield _sse("[DONE]")


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await _respond(request, "text", COMPLETION_FIELDS, _build_completion)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _respond(request, "chat", CHAT_FIELDS, _build_chat)
