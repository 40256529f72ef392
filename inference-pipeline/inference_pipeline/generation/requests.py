"""A generation request, its handle (the caller's view: streamed chunks, status, timings) and the
stop-sequence logic shared by both engines."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from inference_pipeline.generation.sampling import SamplingParams

_ids = itertools.count(1)
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the model (before temperature and cuts),
    and the ``top`` most likely tokens with theirs."""

    logprob: float
    top: dict[int, float]


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """From a [V] logits row: log-softmax in float64."""
    row = logits.astype(np.float64)
    shifted = row - row.max()
    logp = shifted - np.log(np.exp(shifted).sum())
    best = np.argsort(-logp, kind="stable")[:top]
    return TokenLogprob(float(logp[token]), {int(t): float(logp[t]) for t in best})


@dataclass(frozen=True)
class GenerationRequest:
    prompt: bytes
    max_new_tokens: int = 64
    stop: tuple[bytes, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    logprobs: int | None = None  # None: none; k: each token's log-probability and the top k

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, bytes) or not self.prompt:
            raise ValueError("prompt must be non-empty bytes")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not s for s in self.stop):
            raise ValueError("stop sequences must be non-empty")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in 0..{MAX_LOGPROBS}, got {self.logprobs}")


@dataclass(frozen=True)
class Chunk:
    """One streamed event: ``data`` is output bytes; ``finish_reason`` is set on the last one
    ("length", "stop", "cancelled" or "error")."""

    data: bytes
    finish_reason: str | None = None


class RequestHandle:
    """What a caller holds: chunks arrive on ``chunks`` in order, the last one has a reason."""

    def __init__(self, request: GenerationRequest) -> None:
        self.id = next(_ids)
        self.request = request
        self.chunks: queue.SimpleQueue[Chunk] = queue.SimpleQueue()
        self.tokens: list[int] = []  # every generated token id, stop sequence included
        self.output = bytearray()  # what was streamed (stop sequence excluded)
        self.finish_reason: str | None = None
        self.submitted_at = time.perf_counter()
        self.admitted_at: float | None = None  # first scheduled (end of its queue time)
        self.token_times: list[float] = []
        self.logprobs: list[TokenLogprob] = []  # one per token when the request asks for them
        self.finished_at: float | None = None
        self.cancel_requested = threading.Event()
        self._done = threading.Event()
        self._emitted = 0
        # called (from the engine's thread) after each chunk: a server wakes its stream with it
        # instead of parking a thread per stream on ``chunks.get``
        self.listener: Callable[[], None] | None = None
        seed = request.sampling.seed
        self.rng = np.random.default_rng(seed if seed is not None else None)

    def cancel(self) -> None:
        """Ask the engine to drop this request at the next token boundary."""
        self.cancel_requested.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    # ---- called by the engine (one thread) --------------------------------------------------
    def add_token(self, token: int) -> bool:
        """Record a token, stream what is safe to stream; True when the request is finished."""
        self.tokens.append(token)
        self.token_times.append(time.perf_counter())
        if not self.request.stop:  # fast path: every byte is final as soon as it exists
            self._emitted += 1
            self.output.append(token)
            self._put(Chunk(bytes((token,))))
            if len(self.tokens) >= self.request.max_new_tokens:
                self.finish("length")
                return True
            return False
        text = bytes(self.tokens)
        for stop in self.request.stop:
            at = text.find(stop, max(0, self._emitted - len(stop) + 1))
            if at >= 0:
                self._emit(text[:at])
                self.finish("stop")
                return True
        if len(self.tokens) >= self.request.max_new_tokens:
            self._emit(text)
            self.finish("length")
            return True
        # Hold back a tail that could still become a stop sequence.
        held = max(
            (
                n
                for stop in self.request.stop
                for n in range(1, len(stop))
                if text.endswith(stop[:n])
            ),
            default=0,
        )
        self._emit(text[: len(text) - held])
        return False

    def _emit(self, text: bytes) -> None:
        if len(text) > self._emitted:
            piece = text[self._emitted :]
            self._emitted = len(text)
            self.output += piece
            self._put(Chunk(piece))

    def finish(self, reason: str) -> None:
        if self.finish_reason is None:
            self.finish_reason = reason
            self.finished_at = time.perf_counter()
            self._put(Chunk(b"", reason))
            self._done.set()

    def _put(self, chunk: Chunk) -> None:
        self.chunks.put(chunk)
        listener = self.listener
        if listener is not None:
            listener()

    def timings(self) -> tuple[float | None, list[float]]:
        """(time to first token, inter-token gaps), in seconds."""
        if not self.token_times:
            return None, []
        ttft = self.token_times[0] - self.submitted_at
        return ttft, list(np.diff(self.token_times))
