"""Two generation engines over one step function.

ContinuousBatchingEngine: token-level (iteration-level) scheduling as in Orca, vLLM and TGI.
Every iteration (a token boundary) it drops finished and cancelled requests, takes in a prefill
pass that has finished, asks the ``TokenBudgetScheduler`` for a plan (every running decode,
then prefill chunks up to the per-step token budget; blocks on demand, preemption by
recompute, prefix-cache hits), runs a decode pass over each of its two dense pasts (short rows
and long rows, so a short row is not padded to the longest) and samples every decoding
sequence's next token. The budget is what keeps a long new prompt from stalling everyone's
next token (inter-token latency).

With ``concurrent_passes`` (the default) the passes of an iteration run side by side on two
cores: the short rows' decode pass on the engine's thread, the long rows' on a decode worker,
and a prefill pass on a prefill worker *across* iterations: the decode iterations go on while
it runs, and its keys/values are written (and its finished prompts' first tokens sampled) at
the first token boundary after it ends. A running stream's next token then waits for the
decode passes only, never for a newcomer's prompt (an iteration with no decode runs its
prefill pass on the engine's thread, at once). The prefill worker runs at the lowest OS
priority (niceness 19): when the three passes want the two cores at once, the decode passes get
them first and the prefill pass the rest. While a prefill pass is in flight no other
is planned (its sequences' chunks are not in the cache yet).

StaticBatchingEngine: the baseline. It waits for a full batch (or ``max_wait_s``), prefills it,
and decodes every row until the longest one finishes; a finished row's slot idles until then.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import logging
import os
import queue
import sys
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from inference_pipeline.generation.dense_past import DensePast
from inference_pipeline.generation.model import GPTConfig
from inference_pipeline.generation.paged_cache import PagedKVCache
from inference_pipeline.generation.requests import (
    GenerationRequest,
    RequestHandle,
    token_logprob,
)
from inference_pipeline.generation.runtime import StepFunction, empty_past
from inference_pipeline.generation.sampling import sample_rows
from inference_pipeline.generation.scheduler import Plan, SequenceState, TokenBudgetScheduler

log = logging.getLogger(__name__)

# Tokens per iteration (decodes + prefill chunks): chosen by measurement, see GENERATION.md.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 32
# Admission delay, in last-prefill latencies (0: admit at every iteration): see GENERATION.md.
DEFAULT_ADMISSION_DELAY_FACTOR = 0.0
# The prefill worker's OS niceness (Linux, per thread): the lowest priority of the normal policy.
# A decode pass waking up takes a core from it first; under load from other processes it still
# gets a share (under SCHED_IDLE, which gets almost none, the engine's tests took 4x as long
# beside two CPU-bound processes). See GENERATION.md for what it trades.
PREFILL_WORKER_NICENESS = 19


class QueueFull(RuntimeError):
    """The engine's waiting queue is at its limit (a server answers 429/503)."""


class EngineClosed(RuntimeError):
    """The engine is shutting down and takes no new requests."""


@dataclass
class _PrefillPass:
    """A prefill pass: its chunks, where each starts, the step function's inputs (its own copy
    of the chunks' pasts: nothing it reads is written while it runs) and, once launched, the
    future of its outputs."""

    chunks: list[tuple[SequenceState, int]]
    starts: list[int]
    inputs: tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]
    outputs: Job | None = None


@dataclass
class _DecodePass:
    """A decode pass over rows ``0 .. top`` of one dense past, one new token each for ``seqs``
    (at ``rows``); the other rows below ``top`` ride along masked."""

    dense: DensePast
    seqs: list[SequenceState]
    rows: np.ndarray

    @property
    def top(self) -> int:
        return int(self.rows.max()) + 1


def lower_thread_priority(niceness: int) -> None:
    """Lower the calling thread's OS scheduling priority to ``niceness`` (never raise it). Only
    Linux sets a nice value per thread; elsewhere it would apply to a whole process, so this
    does nothing there."""
    if sys.platform.startswith("linux"):
        thread = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, max(current, niceness))


class Job:
    """One call, made once by ``run()`` on whichever thread runs it (a ``Worker``'s, or the
    caller's): ``done()`` without blocking, ``wait()`` until it is, ``result()`` its return
    value (or its exception, raised there)."""

    __slots__ = ("_call", "_finished", "_value", "_error")

    def __init__(self, fn, *args) -> None:
        self._call = (fn, args)
        self._finished = threading.Lock()
        self._finished.acquire()  # released once the call has returned or raised
        self._value = self._error = None

    def run(self) -> None:
        (fn, args), self._call = self._call, None  # the call's objects are not kept past it
        try:
            self._value = fn(*args)
        except BaseException as error:  # handed to whoever asks for the result
            self._error = error
        self._finished.release()

    def done(self) -> bool:
        if self._finished.acquire(blocking=False):
            self._finished.release()
            return True
        return False

    def wait(self) -> None:
        with self._finished:
            pass

    def result(self):
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Worker:
    """One daemon thread that runs the calls handed to it, in order. The hand-off is a C-level
    queue and one lock per call, not an executor: it happens at every token boundary, and an
    executor's bookkeeping (futures, condition variables) is Python that holds the GIL the
    engine's thread needs.
    ``niceness``: the thread's OS scheduling priority (None: the process's)."""

    def __init__(self, name: str, niceness: int | None = None) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._niceness = niceness
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        _live_workers.add(self)

    def submit(self, fn, *args) -> Job:
        job = Job(fn, *args)
        self._calls.put(job)
        return job

    def shutdown(self, wait: bool = False) -> None:
        """The thread ends once the calls already handed to it have run (``wait``: return
        then)."""
        self._calls.put(None)
        if wait:
            self._thread.join()

    def _serve(self) -> None:
        if self._niceness is not None:
            lower_thread_priority(self._niceness)
        while (job := self._calls.get()) is not None:
            job.run()


_live_workers: weakref.WeakSet[Worker] = weakref.WeakSet()


@atexit.register
def _end_workers() -> None:
    """At exit, every worker finishes its calls and ends before the interpreter (and the
    native libraries a call may be inside) is torn down under it."""
    for worker in list(_live_workers):
        worker.shutdown(wait=True)


@dataclass
class EngineStats:
    iterations: int = 0
    decode_passes: int = 0
    prefill_passes: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0


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

    def _emit(self, handles: list[RequestHandle], logits: np.ndarray) -> None:
        """The next token of each of ``handles`` from its row of ``logits`` [N, V], sampled
        in one call (the greedy rows in one argmax), then recorded and streamed."""
        params = [h.request.sampling for h in handles]
        tokens = sample_rows(logits, params, [h.rng for h in handles])
        self.stats.generated_tokens += len(handles)
        for handle, token, row in zip(handles, tokens, logits, strict=True):
            if handle.request.logprobs is not None:
                handle.logprobs.append(token_logprob(row, token, handle.request.logprobs))
            handle.add_token(token)

    def run_until_idle(self, max_iterations: int = 1_000_000) -> None:
        for _ in range(max_iterations):
            if not self.step():
                return
        raise RuntimeError(f"still busy after {max_iterations} iterations")


def blocks_for_sequences(config: GPTConfig, sequences: int, block_size: int = 16) -> int:
    """KV blocks that hold ``sequences`` full-context sequences: the engine's default pool."""
    return sequences * -(-config.max_positions // block_size)


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
        short_width: int | None = None,
        concurrent_passes: bool = True,
        admission_delay_factor: float = DEFAULT_ADMISSION_DELAY_FACTOR,
    ) -> None:
        super().__init__(step, max_queue)
        self.cache = PagedKVCache(
            self.config,
            num_blocks or blocks_for_sequences(self.config, max_num_seqs, block_size),
            block_size,
            prefix_caching=prefix_caching and not reserve_up_front,
        )
        self.scheduler = TokenBudgetScheduler(
            self.cache, self._lock, max_num_seqs, max_num_batched_tokens, reserve_up_front,
            admission_delay_factor,
        )  # fmt: skip
        self._waiting = self.scheduler.waiting  # submit() appends, the scheduler pops
        # The blocks are the source of truth (prefix sharing, preemption); the step graph reads
        # a dense past, kept here, one row per running sequence, appended to in place. A
        # decode pass reads every row up to its past's width, so rows live in two dense pasts
        # by length: rows of up to ``short_width`` slots (most of a long-tailed batch) are
        # not padded to the longest row; a row that outgrows them moves over once. Each past
        # has its full width from the start: a busy batch nearly always holds a row near it,
        # and a resize would copy every live row inside the streams' gap.
        short_width = short_width or self.config.max_positions // 2
        self.dense = [DensePast(self.config, max_num_seqs, short_width, short_width)]
        if short_width < self.config.max_positions:  # else every row fits the one past
            positions = self.config.max_positions
            self.dense.append(DensePast(self.config, max_num_seqs, positions, positions))
        self._row_of: dict[int, tuple[int, int]] = {}  # sequence id -> (dense past, row)
        self._free_rows = [list(range(max_num_seqs)) for _ in self.dense]
        self._freed = False  # a row was freed since the last compaction
        self._prefilling: _PrefillPass | None = None  # the prefill pass in flight
        # With ``concurrent_passes`` the step calls run on these workers while this thread runs
        # the short rows' decode pass: the step function releases the GIL (ONNX Runtime's
        # run, PyTorch's ops), so on two cores a pass beside another costs about its own
        # time. The prefill worker runs only step calls; the decode worker runs the long rows'
        # whole decode pass, inputs to the writes into their dense past, which nothing else
        # touches meanwhile. Every write to the block cache is on this thread.
        self._prefill_worker = self._decode_worker = None
        if concurrent_passes:
            self._prefill_worker = self._worker("generation-prefill", PREFILL_WORKER_NICENESS)
            self._decode_worker = self._worker("generation-decode")

    def _worker(self, name: str, niceness: int | None = None) -> Worker:
        """One worker thread, ended when the engine is collected."""
        worker = Worker(name, niceness)
        weakref.finalize(self, worker.shutdown)
        return worker

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
        self.scheduler.enqueue(handle)

    def has_work(self) -> bool:
        return bool(self.running or self.queue_depth())

    def step(self) -> bool:
        """One iteration; False when there was nothing to do."""
        try:
            busy = self._step()
        except Exception:
            # The model failed: end every running request with "error" (streams close, blocks
            # return) rather than leave callers waiting; the caller sees the exception.
            for seq in self.running:
                seq.handle.finish("error")
            self._retire()
            raise
        self._retire()
        return busy

    def _step(self) -> bool:
        if self._prefilling is not None and self._prefilling.outputs.done():
            self._finish_prefill()
        self._retire()  # after the prefill: its first token may have been a request's last
        plan = self.scheduler.schedule(prefill=self._prefilling is None)
        self._forget([s.id for s in plan.preempted])
        if not plan:
            if self._prefilling is None:
                return bool(self.running)
            self._prefilling.outputs.wait()  # only the prefill pass is left to run
            self._finish_prefill()
            return True
        self.stats.iterations += 1
        self._iterate(plan)
        return True

    def _iterate(self, plan: Plan) -> None:
        """Place every row first (a placement may move a row), then launch the
        passes, the longest first: the long rows' decode pass on the decode worker, the
        prefill pass (on its worker, or on this thread and taken in at once when the passes
        are serial) and the short rows' decode pass here. The short rows' keys/values are
        written and their tokens sampled as soon as their pass ends, the long rows' once
        theirs has. The decode passes read their dense pasts in place and nothing writes a
        past while a pass reads it; the prefill pass reads its own copy. A decode pass is one
        job, inputs to written keys/values (``_run_decode``): on the worker its Python runs
        while this thread's pass holds no GIL, off this thread's path."""
        lengths = self.cache.lengths
        places = [self._row(s, lengths[s.id] + 1) for s in plan.decode]
        starts = [lengths.get(seq.id, 0) for seq, _ in plan.prefill]
        chunk_places = [
            self._row(seq, s + n) for (seq, n), s in zip(plan.prefill, starts, strict=True)
        ]
        here, there = self._decode_lanes(plan.decode, places)
        beside = None
        if there:  # at most one pass
            beside = self._decode_worker.submit(self._run_decode, there[0])
        # A prefill pass goes to its worker when decode passes run beside it; with none to run
        # (a lone request, an idle server) it runs here and now, so it never waits for an idle
        # core that another process holds.
        prefill_here = bool(plan.prefill) and (self._prefill_worker is None or not plan.decode)
        try:
            if plan.prefill:  # planned only when no prefill pass is in flight
                self._prefilling = self._prefill_inputs(plan.prefill, starts, chunk_places)
                worker = None if prefill_here else self._prefill_worker
                self._prefilling.outputs = self._launch(worker, self._prefilling.inputs)
            logits = [self._run_decode(p) for p in here]
            if beside is not None and not beside.done():
                # The long rows' pass is still running: finish the short rows meanwhile (their
                # dense past, blocks and streams are not what it reads or writes).
                self._decodes_done(here, logits)
                here, logits = [], []
            if beside is not None:
                logits.append(beside.result())
        except BaseException:
            if beside is not None:
                beside.wait()  # the worker is done reading before the caller goes on
            raise
        self._decodes_done(here + there, logits)
        if prefill_here:
            self._finish_prefill()

    def _decode_lanes(
        self, seqs: list[SequenceState], places: list[tuple[int, int]]
    ) -> tuple[list[_DecodePass], list[_DecodePass]]:
        """The iteration's decode passes, one per dense past with a decoding row: (those run
        here, the one run on the decode worker: the long rows', when both pasts have one)."""
        members: list[tuple[list[SequenceState], list[int]]] = [([], []) for _ in self.dense]
        for seq, (which, row) in zip(seqs, places, strict=True):
            members[which][0].append(seq)
            members[which][1].append(row)
        passes = [
            _DecodePass(dense, lane_seqs, np.array(rows))
            for dense, (lane_seqs, rows) in zip(self.dense, members, strict=True)
            if lane_seqs
        ]
        if self._decode_worker is not None and len(passes) > 1:
            return passes[:-1], passes[-1:]
        return passes, []

    def _launch(self, worker: Worker | None, inputs) -> Job:
        """The prefill pass on ``inputs`` (``_run_prefill``), on ``worker`` (None: here, now)."""
        if worker is not None:
            return worker.submit(self._run_prefill, inputs)
        job = Job(self._run_prefill, inputs)
        job.run()  # here, now: a failure is raised when the pass is taken in
        return job

    def _run_prefill(self, inputs) -> tuple[np.ndarray, np.ndarray]:
        """The step function on a prefill pass's ``inputs``: its logits ``[B, T, V]`` and its
        2L key/value outputs side by side in one copy, ``[B, 2L, H, T, D]`` (keys at even
        indices), made where the pass ran, off the engine's thread when that is a worker."""
        logits, new_kv = self.step_fn(*inputs)
        batch, heads, new, dim = new_kv[0].shape
        return logits, np.concatenate(new_kv, axis=1).reshape(batch, len(new_kv), heads, new, dim)

    def _retire(self) -> None:
        """Drop finished and cancelled sequences; their blocks go back to the pool."""
        ended = [
            seq
            for seq in self.running
            if seq.handle.finish_reason is not None or seq.handle.cancel_requested.is_set()
        ]
        for seq in ended:
            seq.handle.finish("cancelled")  # no-op when it had already finished
            self.scheduler.release(seq)
        self._forget([seq.id for seq in ended])  # also compacts after a row moved pasts

    def _forget(self, ids: list[int]) -> None:
        """Sequences that left the cache give up their dense rows, and the rows above any free
        row (left by them or by a row that moved to the long past) move down into it. Called
        between iterations only (no pass holds a row index)."""
        for place in [self._row_of.pop(i) for i in ids if i in self._row_of]:
            self._free(*place)
        if not self._freed:  # no row was freed: nothing to move down
            return
        self._freed = False
        for which in range(len(self.dense)):
            self._compact(which)

    def _compact(self, which: int) -> None:
        """Move the highest rows of dense past ``which`` into its lowest free rows, so its rows
        in use are ``0 .. n - 1``: a pass reads rows ``0 .. top`` and costs per row, so an idle
        row below ``top`` costs as much as a live one, every pass, while one move copies the
        row's slots once."""
        free = self._free_rows[which]
        used = sorted((row, i) for i, (w, row) in self._row_of.items() if w == which)
        while free and used and free[0] < used[-1][0]:
            source, seq_id = used.pop()
            target = free.pop(0)
            self.dense[which].move(source, target)
            self._row_of[seq_id] = (which, target)
            bisect.insort(used, (target, seq_id))
            bisect.insort(free, source)

    def _free(self, which: int, row: int) -> None:
        self.dense[which].clear(row)
        self._freed = True
        self._free_rows[which].append(row)
        self._free_rows[which].sort()  # rows are taken lowest first: passes feed 0 .. top

    def _row(self, seq: SequenceState, tokens: int) -> tuple[int, int]:
        """(dense past, row) of the sequence, with room for ``tokens`` slots (each past has its
        full width). A sequence seen for the first time takes the lowest free row of the past
        its length belongs to and copies in what the blocks already hold for it (a prefix-cache
        hit); one that outgrows the short rows moves its slots to a long row."""
        place = self._row_of.get(seq.id)
        which = 0 if tokens <= self.dense[0].max_width else 1
        if place is not None and place[0] >= which:
            return place
        target = self.dense[which]
        row = self._free_rows[which].pop(0)
        if place is None:
            if self.cache.lengths.get(seq.id, 0):
                target.write(row, *self.cache.read(seq.id))
            else:
                target.clear(row)
        else:
            source, old = self.dense[place[0]], place[1]
            n = int(source.lengths[old])
            target.write(row, source.kv[0::2, old, :, :n], source.kv[1::2, old, :, :n])
            self._free(*place)
        self._row_of[seq.id] = (which, row)
        return which, row

    def _decode_inputs(self, decode: _DecodePass):
        """The step function's inputs for ``decode``: rows ``0 .. top`` of its dense past, one
        new token for each decoding sequence; rows of sequences not decoding ride along
        masked, their outputs dropped."""
        dense, top = decode.dense, decode.top
        tokens = np.zeros((top, 1), dtype=np.int64)
        tokens[decode.rows, 0] = [s.handle.tokens[-1] for s in decode.seqs]
        positions = np.minimum(dense.lengths[:top], self.config.max_positions - 1)[:, None]
        return tokens, positions, dense.decode_mask(top), dense.past(top)

    def _run_decode(self, decode: _DecodePass) -> np.ndarray:
        """One decode pass from start to end: its inputs, the step function, and its new
        keys/values written to its dense rows (nothing else touches that past meanwhile).
        Returns the decoding rows' logits ``[len(seqs), V]``."""
        logits, new = self.step_fn(*self._decode_inputs(decode))
        decode.dense.append_one_each(decode.rows, new)
        return logits[decode.rows, 0]

    def _decodes_done(self, decodes: list[_DecodePass], logits: list[np.ndarray]) -> None:
        """After ``decodes`` ran (``_run_decode``, one logits block each): the blocks record the
        fed tokens, and a block a token filled is written from its dense row (the pool is
        touched once per block, not per token); the next token of every sequence they decoded
        is sampled in one call."""
        if not decodes:
            return
        seqs = [s for decode in decodes for s in decode.seqs]
        fed = [s.handle.tokens[-1] for s in seqs]  # what the passes fed (_decode_inputs)
        for seq_id, block in self.cache.advance_one_each([s.id for s in seqs], fed):
            which, row = self._row_of[seq_id]
            end = self.cache.lengths[seq_id]
            kv = self.dense[which].kv[:, row, :, end - self.cache.block_size : end]
            self.cache.write_block(block, kv[0::2], kv[1::2])
        self.stats.decode_passes += len(decodes)
        self._emit(
            [s.handle for s in seqs], np.concatenate(logits) if len(logits) > 1 else logits[0]
        )

    def _prefill_inputs(
        self,
        chunks: list[tuple[SequenceState, int]],
        starts: list[int],
        places: list[tuple[int, int]],
    ) -> _PrefillPass:
        """One pass over the chunks, each after its sequence's ``start`` cached tokens (copied
        from its dense row, at ``places``, into the pass's own past)."""
        width, new = max(starts), max(n for _, n in chunks)
        tokens = np.zeros((len(chunks), new), dtype=np.int64)
        positions = np.zeros((len(chunks), new), dtype=np.int64)
        mask = np.zeros((len(chunks), width + new), dtype=np.int64)
        mask[:, :width] = np.arange(width) < np.array(starts)[:, None]
        for i, ((seq, n), start) in enumerate(zip(chunks, starts, strict=True)):
            tokens[i, :n] = seq.known()[start : start + n]
            positions[i] = start + np.minimum(np.arange(new), n - 1)
            mask[i, width : width + n] = 1
        c = self.config
        past = np.zeros((2 * c.n_layer, len(chunks), c.n_head, width, c.head_dim), np.float32)
        for i, ((which, row), start) in enumerate(zip(places, starts, strict=True)):
            past[:, i, :, :start] = self.dense[which].kv[:, row, :, :start]
        return _PrefillPass(chunks, starts, (tokens, positions, mask, list(past)))

    def _finish_prefill(self) -> None:
        """Take in the finished prefill pass: each chunk's new keys/values go to the blocks and
        to its row; a sequence whose known tokens are now all cached samples its next token
        from its last position. A chunk whose sequence left meanwhile (finished, cancelled or
        preempted: its blocks went back) is dropped; a preempted one is prefilled again when
        it is readmitted."""
        prefill, self._prefilling = self._prefilling, None
        logits, kv = prefill.outputs.result()
        tokens = prefill.inputs[0]
        keys, values = kv[:, 0::2], kv[:, 1::2]
        self.stats.prefill_passes += 1
        running = {seq.id for seq in self.running}
        ready, last = [], []
        for i, ((seq, n), start) in enumerate(zip(prefill.chunks, prefill.starts, strict=True)):
            if seq.id not in running or self.cache.lengths.get(seq.id) != start:
                continue
            which, row = self._row(seq, start + n)  # its row may have moved meanwhile
            chunk_keys, chunk_values = keys[i, :, :, :n], values[i, :, :, :n]  # [L, H, n, D]
            self.cache.append(seq.id, tokens[i, :n].tolist(), chunk_keys, chunk_values)
            self.dense[which].write(row, chunk_keys, chunk_values, start)
            self.stats.prefill_tokens += n
            if self.scheduler.remaining(seq) == 0:  # its last known token predicts the next
                ready.append(seq.handle)
                last.append(logits[i, n - 1])
        if ready:
            self._emit(ready, np.stack(last))


class StaticBatchingEngine(_Engine):
    def __init__(
        self,
        step: StepFunction,
        batch_size: int = 16,
        max_wait_s: float = 0.05,
        max_queue: int = 1024,
        grow: int = 32,
    ) -> None:
        super().__init__(step, max_queue)
        self.batch_size = batch_size
        self.max_wait_s = max_wait_s
        self.draining = False  # set when no more requests will come: run a partial batch
        self.peak_width = 0  # longest dense cache a batch reached (slots per row)
        # The batch's past, one row per request, appended to in place (as the continuous
        # engine keeps it): the same step graph, the same cost per slot.
        self.dense = DensePast(self.config, batch_size, grow=grow)

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
        logits, new = self.step_fn(tokens, positions, mask, empty_past(self.config, len(handles)))
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += sum(map(len, prompts))
        dense = self.dense
        for row in range(dense.rows):
            dense.clear(row)
        dense.fit()
        dense.reserve(width + 1)
        keys, values = np.stack(new[0::2]), np.stack(new[1::2])  # [L, B, H, T, D]
        for i, prompt in enumerate(prompts):
            dense.write(i, keys[:, i, :, : len(prompt)], values[:, i, :, : len(prompt)])
        last = logits[np.arange(len(prompts)), [len(p) - 1 for p in prompts]]
        while True:
            for handle in handles:
                if handle.cancel_requested.is_set():
                    handle.finish("cancelled")
            going = [i for i, h in enumerate(handles) if not h.done]
            if going:
                self._emit([handles[i] for i in going], last[going])
            live = np.array([i for i, h in enumerate(handles) if not h.done])
            self.peak_width = max(self.peak_width, dense.width)
            if not len(live):
                return
            # Every row runs, finished or not: the batch is as long as its longest request.
            # A finished row's slot idles (its past stops growing, its outputs are dropped).
            dense.reserve(int(dense.lengths[live].max()) + 1)
            feed = np.array([[h.tokens[-1] if h.tokens else 0] for h in handles], dtype=np.int64)
            positions = np.minimum(dense.lengths[: len(handles)], self.config.max_positions - 1)
            positions = positions[:, None]
            logits, new = self.step_fn(
                feed, positions, dense.decode_mask(len(handles)), dense.past(len(handles))
            )
            dense.append_one_each(live, new)
            self.stats.decode_passes += 1
            last = logits[:, 0]


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
