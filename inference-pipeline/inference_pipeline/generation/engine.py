"""Two generation engines over one step function.

ContinuousBatchingEngine: token-level (iteration-level) scheduling as in Orca, vLLM and TGI.
Every iteration (a token boundary) it drops finished and cancelled requests, asks the
``TokenBudgetScheduler`` for a plan (every running decode, then prefill chunks up to the
per-step token budget; blocks on demand, preemption by recompute, prefix-cache hits), runs one
decode pass and one prefill pass, and samples the next token of every sequence whose known
tokens are all in the cache. The budget is what keeps a long new prompt from stalling
everyone's next token (inter-token latency).

StaticBatchingEngine: the baseline. It waits for a full batch (or ``max_wait_s``), prefills it,
and decodes every row until the longest one finishes; a finished row's slot idles until then.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from inference_pipeline.generation.paged_cache import PagedKVCache
from inference_pipeline.generation.requests import (
    GenerationRequest,
    RequestHandle,
    token_logprob,
)
from inference_pipeline.generation.runtime import StepFunction, empty_past
from inference_pipeline.generation.sampling import sample_next
from inference_pipeline.generation.scheduler import SequenceState, TokenBudgetScheduler

log = logging.getLogger(__name__)

# Re-gather the decode batch from the blocks once its kept past is this many slots wider than
# its longest sequence (holes and padding cost attention work; a gather costs two copies).
REGATHER_SLACK = 16
# Tokens per iteration (decodes + prefill chunks): chosen by measurement, see GENERATION.md.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 96


class QueueFull(RuntimeError):
    """The engine's waiting queue is at its limit (a server answers 429/503)."""


class EngineClosed(RuntimeError):
    """The engine is shutting down and takes no new requests."""


@dataclass
class EngineStats:
    iterations: int = 0
    decode_passes: int = 0
    prefill_passes: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    gathers: int = 0  # dense pasts rebuilt from the blocks


class _Engine:
    def __init__(self, step: StepFunction, max_queue: int) -> None:
        self.step_fn = step
        self.config = step.config
        self.max_queue = max_queue
        self.stats = EngineStats()
        self._waiting: collections.deque = collections.deque()
        self._lock = threading.RLock()  # has_work() is also called under the condition
        self.work_available = threading.Condition(self._lock)
        self.closed = False

    def submit(self, request: GenerationRequest) -> RequestHandle:
        total = len(request.prompt) + request.max_new_tokens
        if total > self.config.max_positions:
            raise ValueError(
                f"prompt ({len(request.prompt)} bytes) + max_new_tokens ({request.max_new_tokens})"
                f" exceeds the model's {self.config.max_positions} positions"
            )
        self._check_fits(request)
        handle = RequestHandle(request)
        with self._lock:
            if self.closed:
                raise EngineClosed("the generation engine is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests already waiting")
            self._enqueue(handle)
            self.work_available.notify()
        return handle

    def _check_fits(self, request: GenerationRequest) -> None:
        """Raise ValueError for a request this engine can never run."""

    def _enqueue(self, handle: RequestHandle) -> None:
        self._waiting.append(handle)

    def queue_depth(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _pop_waiting(self, limit: int) -> list[RequestHandle]:
        with self._lock:
            taken = []
            while self._waiting and len(taken) < limit:
                taken.append(self._waiting.popleft())
            return taken

    def _emit(self, handle: RequestHandle, logits_row: np.ndarray) -> bool:
        token = sample_next(logits_row, handle.request.sampling, handle.rng)
        self.stats.generated_tokens += 1
        if handle.request.logprobs is not None:
            handle.logprobs.append(token_logprob(logits_row, token, handle.request.logprobs))
        return handle.add_token(token)

    def run_until_idle(self, max_iterations: int = 1_000_000) -> None:
        for _ in range(max_iterations):
            if not self.step():
                return
        raise RuntimeError(f"still busy after {max_iterations} iterations")


class ContinuousBatchingEngine(_Engine):
    def __init__(
        self,
        step: StepFunction,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        num_blocks: int | None = None,
        block_size: int = 16,
        max_queue: int = 1024,
        prefix_caching: bool = True,
        reserve_up_front: bool = False,
    ) -> None:
        super().__init__(step, max_queue)
        per_sequence = -(-self.config.max_positions // block_size)
        self.cache = PagedKVCache(
            self.config,
            num_blocks or max_num_seqs * per_sequence,
            block_size,
            prefix_caching=prefix_caching and not reserve_up_front,
        )
        self.scheduler = TokenBudgetScheduler(
            self.cache, self._lock, max_num_seqs, max_num_batched_tokens, reserve_up_front
        )
        self._waiting = self.scheduler.waiting  # submit() appends, the scheduler pops
        self._slots: list[int | None] = []  # sequence id of each row of the kept decode batch
        self._dense_past: list[np.ndarray] = []
        self._dense_mask = np.zeros((0, 0), dtype=np.int64)

    @property
    def running(self) -> list[SequenceState]:
        return self.scheduler.running

    def _check_fits(self, request: GenerationRequest) -> None:
        need = self.cache.blocks_for(len(request.prompt) + request.max_new_tokens)
        if need > self.cache.num_blocks:
            raise ValueError(
                f"prompt + max_new_tokens needs {need} cache blocks, the pool has "
                f"{self.cache.num_blocks}"
            )

    def _enqueue(self, handle: RequestHandle) -> None:
        self._waiting.append(SequenceState(handle))

    def has_work(self) -> bool:
        return bool(self.running or self.queue_depth())

    def step(self) -> bool:
        """One iteration; False when there was nothing to do."""
        self._retire()
        plan = self.scheduler.schedule()
        self._forget([s.id for s in plan.preempted])
        if not plan:
            return bool(self.running)
        self.stats.iterations += 1
        try:
            self._decode(plan.decode)
            self._prefill(plan.prefill)
        except Exception:
            # The model failed: end every running request with "error" (streams close, blocks
            # return) rather than leave callers waiting; the caller sees the exception.
            for seq in self.running:
                seq.handle.finish("error")
            self._slots, self._dense_past = [], []
            self._retire()
            raise
        self._retire()
        return True

    def _retire(self) -> None:
        """Drop finished and cancelled sequences; their blocks go back to the pool."""
        gone = []
        for seq in list(self.running):
            if seq.handle.cancel_requested.is_set():
                seq.handle.finish("cancelled")  # no-op when it had already finished
            if seq.handle.done:
                self.scheduler.release(seq)
                gone.append(seq.id)
        self._forget(gone)

    def _forget(self, ids: list[int]) -> None:
        """Sequences that left the cache leave the kept decode batch too (masked holes)."""
        if ids and self._slots:
            self._slots = [None if s in ids else s for s in self._slots]
            self._dense_mask[[s is None for s in self._slots]] = 0

    def _run(self, seqs: list[SequenceState], rows: list[list[int]]) -> np.ndarray:
        """Prefill pass: row i feeds tokens rows[i] after seqs[i]'s cached ones (a dense past
        gathered from the blocks); stores the new keys/values in the blocks; returns logits."""
        ids = [s.id for s in seqs]
        past, lengths = self.cache.gather(ids)
        width, new = past[0].shape[2], max(len(r) for r in rows)
        tokens = np.zeros((len(rows), new), dtype=np.int64)
        positions = np.zeros((len(rows), new), dtype=np.int64)
        mask = np.zeros((len(rows), width + new), dtype=np.int64)
        mask[:, :width] = np.arange(width) < lengths[:, None]
        for i, row in enumerate(rows):
            tokens[i, : len(row)] = row
            positions[i] = lengths[i] + np.minimum(np.arange(new), len(row) - 1)
            mask[i, width : width + len(row)] = 1
        logits, present = self.step_fn(tokens, positions, mask, past)
        new_k = np.stack([k[:, :, width:] for k in present[0::2]])  # [L, B, H, T, D]
        new_v = np.stack([v[:, :, width:] for v in present[1::2]])
        for i, (seq_id, row) in enumerate(zip(ids, rows, strict=True)):
            n = len(row)
            self.cache.append(seq_id, row, new_k[:, i, :, :n], new_v[:, i, :, :n])
        return logits

    def _dense_batch(self, ids: list[int]) -> None:
        """Make the kept dense decode batch hold exactly ``ids``.

        The blocks are the source of truth; gathering all of them costs two copies of the
        batch's whole cache, so between passes the previous pass's present keys/values are kept
        as the next past. A request that leaves becomes a masked hole; one that joins is copied
        from its blocks into a hole; everything is re-gathered only when no hole is free or the
        kept width has grown ``REGATHER_SLACK`` beyond the longest sequence."""
        wanted = set(ids)
        self._slots = [s if s in wanted else None for s in self._slots]
        self._dense_mask[[s is None for s in self._slots]] = 0
        joining = [i for i in ids if i not in self._slots]
        holes = [row for row, s in enumerate(self._slots) if s is None]
        width = self._dense_past[0].shape[2] if self._dense_past else 0
        longest = max(self.cache.lengths[i] for i in ids)
        if len(joining) > len(holes) or longest > width or width > longest + REGATHER_SLACK:
            # room for as many joiners again (up to the running cap): joining then fills holes
            rows = min(max(self.scheduler.max_num_seqs, len(ids)), 2 * len(ids))
            self._dense_past, lengths = self.cache.gather(ids, rows, purpose="decode")
            self._slots = [*ids, *([None] * (rows - len(ids)))]
            self._dense_mask = (np.arange(self._dense_past[0].shape[2]) < lengths[:, None]).astype(
                np.int64
            )
            self.stats.gathers += 1
            return
        for seq_id, row in zip(joining, holes, strict=False):
            past, lengths = self.cache.gather([seq_id])
            n = int(lengths[0])
            for dense, part in zip(self._dense_past, past, strict=True):
                dense[row, :, :n] = part[0, :, :n]
            self._dense_mask[row] = np.arange(width) < n
            self._slots[row] = seq_id

    def _decode(self, seqs: list[SequenceState]) -> None:
        if not seqs:
            return
        by_id = {s.id: s for s in seqs}
        self._dense_batch(list(by_id))
        rows = len(self._slots)
        width = self._dense_past[0].shape[2]
        tokens = np.zeros((rows, 1), dtype=np.int64)
        positions = np.zeros((rows, 1), dtype=np.int64)
        live = np.array([s is not None for s in self._slots])
        for row, seq_id in enumerate(self._slots):
            if seq_id is not None:
                tokens[row, 0] = by_id[seq_id].handle.tokens[-1]
                positions[row, 0] = self.cache.lengths[seq_id]
        mask = np.concatenate([self._dense_mask, live[:, None].astype(np.int64)], axis=1)
        logits, present = self.step_fn(tokens, positions, mask, self._dense_past)
        rows_live = [row for row, seq_id in enumerate(self._slots) if seq_id is not None]
        self.cache.append_one_each(
            [self._slots[row] for row in rows_live],
            [int(tokens[row, 0]) for row in rows_live],
            np.stack([k[rows_live, :, width] for k in present[0::2]]),
            np.stack([v[rows_live, :, width] for v in present[1::2]]),
        )
        self._dense_past, self._dense_mask = present, mask
        self.stats.decode_passes += 1
        for row, seq_id in enumerate(self._slots):
            if seq_id is not None:
                self._emit(by_id[seq_id].handle, logits[row, 0])

    def _prefill(self, chunks: list[tuple[SequenceState, int]]) -> None:
        if not chunks:
            return
        rows = []
        for seq, count in chunks:
            start = self.cache.lengths.get(seq.id, 0)
            rows.append(seq.known()[start : start + count])
        logits = self._run([seq for seq, _ in chunks], rows)
        self.stats.prefill_passes += 1
        for i, (seq, count) in enumerate(chunks):
            self.stats.prefill_tokens += count
            if self.scheduler.remaining(seq) == 0:  # its last known token predicts the next
                self._emit(seq.handle, logits[i, count - 1])


class StaticBatchingEngine(_Engine):
    def __init__(
        self,
        step: StepFunction,
        batch_size: int = 16,
        max_wait_s: float = 0.05,
        max_queue: int = 1024,
    ) -> None:
        super().__init__(step, max_queue)
        self.batch_size = batch_size
        self.max_wait_s = max_wait_s
        self.draining = False  # set when no more requests will come: run a partial batch
        self.peak_width = 0  # longest dense cache a batch reached (slots per row)

    def has_work(self) -> bool:
        return bool(self.queue_depth())

    def step(self) -> bool:
        """Run one whole batch to completion; False when nothing was queued."""
        deadline = time.perf_counter() + self.max_wait_s
        with self._lock:
            while len(self._waiting) < self.batch_size and not self.draining:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self.work_available.wait(remaining)
        handles = self._pop_waiting(self.batch_size)
        if not handles:
            return False
        try:
            self._run_batch(handles)
        except Exception:
            for handle in handles:  # the model failed: no caller waits forever
                handle.finish("error")
            raise
        return True

    def _run_batch(self, handles: list[RequestHandle]) -> None:
        self.stats.iterations += 1
        prompts = [h.request.prompt for h in handles]
        width = max(len(p) for p in prompts)
        tokens = np.zeros((len(handles), width), dtype=np.int64)
        positions = np.zeros_like(tokens)
        mask = np.zeros_like(tokens)
        for i, prompt in enumerate(prompts):
            tokens[i, : len(prompt)] = list(prompt)
            positions[i] = np.minimum(np.arange(width), len(prompt) - 1)
            mask[i, : len(prompt)] = 1
        logits, past = self.step_fn(tokens, positions, mask, empty_past(self.config, len(handles)))
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += sum(map(len, prompts))
        last = [logits[i, len(p) - 1] for i, p in enumerate(prompts)]
        next_position = np.array([len(p) for p in prompts], dtype=np.int64)
        while True:
            for i, handle in enumerate(handles):
                if handle.cancel_requested.is_set():
                    handle.finish("cancelled")
                if not handle.done:
                    self._emit(handle, last[i])
            if all(h.done for h in handles):
                self.peak_width = max(self.peak_width, mask.shape[1])
                return
            # Every row runs, finished or not: the batch is as long as its longest request.
            feed = np.array([[h.tokens[-1] if h.tokens else 0] for h in handles], dtype=np.int64)
            mask = np.concatenate([mask, np.ones((len(handles), 1), dtype=np.int64)], axis=1)
            # A finished row keeps running; clamp its position so it stays a valid index.
            positions = np.minimum(next_position, self.config.max_positions - 1)[:, None]
            logits, past = self.step_fn(feed, positions, mask, past)
            self.stats.decode_passes += 1
            next_position += 1
            last = [logits[i, 0] for i in range(len(handles))]


class EngineRunner:
    """Drives an engine from a background thread (what a server uses)."""

    def __init__(self, engine: ContinuousBatchingEngine | StaticBatchingEngine) -> None:
        self.engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="generation-engine", daemon=True)

    def start(self) -> EngineRunner:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.engine.step()
            except Exception:  # the engine ended the affected requests with "error"
                log.exception("generation step failed")
                continue
            if not busy:
                with self.engine.work_available:
                    if not self.engine.has_work():
                        self.engine.work_available.wait(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Refuse new requests, let accepted ones finish (bounded by ``timeout``), stop."""
        with self.engine.work_available:
            self.engine.closed = True
        if isinstance(self.engine, StaticBatchingEngine):
            self.engine.draining = True
        deadline = threading.Event()
        waited = 0.0
        while self.engine.has_work() and waited < timeout:
            deadline.wait(0.02)
            waited += 0.02
        self._stop.set()
        with self.engine.work_available:
            self.engine.work_available.notify_all()
        self._thread.join(timeout)
