"""A dynamic batcher with Triton's semantics, plus length-aware grouping.

What it does, in Triton's terms:
- ``max_batch_size`` rows per execution; a request may carry several rows.
- ``preferred_batch_size``: when the queue can form one, the largest one goes at once.
- ``max_queue_delay``: otherwise wait, but never longer than this after the OLDEST queued
  request (the batch's head) arrived; then run what is there.
- a bounded queue (``max_queue_size`` requests): a request that finds it full is rejected at
  once (``QueueFullError``), so overload costs the client a fast error, not unbounded latency.
- a per-request timeout, counted while queued (Triton's ``default_timeout_microseconds``).
- priority levels: 1 is the highest; a batch is led by the oldest request of the highest
  non-empty level and filled from the levels in order.
And beyond Triton: a batch never mixes token lengths more than ``length_bucket_ratio`` apart,
so short texts do not pay for a long one's padding; and requests whose client has gone are
dropped from the queue before they cost compute.

Execution happens in worker threads, one per model instance (``instance_group`` count), so the
event loop keeps accepting requests while ONNX Runtime (which releases the GIL) computes.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from inference_pipeline.serving.config import BatchingSettings


class BatcherError(Exception):
    """Base of the errors a caller of ``submit`` can get."""


class QueueFullError(BatcherError):
    """The bounded queue is full; the request was rejected without waiting."""


class RequestTimeoutError(BatcherError):
    """The request waited in the queue longer than its timeout."""


class BatcherClosedError(BatcherError):
    """The batcher is shutting down and accepts no new work."""


class InvalidRequestError(BatcherError):
    """The request cannot be batched (too many rows, unknown priority level)."""


class BatchObserver(Protocol):
    """Receives the batcher's measurements (the Prometheus metrics implement this)."""

    def queue_size(self, requests: int) -> None: ...
    def batch_done(self, rows: int, compute_s: float, queue_s: Sequence[float]) -> None: ...


@dataclass(eq=False)
class _Job:
    payload: Any
    rows: int
    length: int
    shape_key: Hashable
    priority: int
    enqueued: float
    deadline: float | None
    future: asyncio.Future = field(repr=False)


RunBatch = Callable[[int, list[Any]], list[Any]]


class DynamicBatcher:
    """Collects requests into batches and runs them with ``run_batch(instance, payloads)``.

    ``run_batch`` is called in a worker thread and must return one result per payload, in
    order. ``submit`` returns that request's result (or raises a ``BatcherError``).
    """

    def __init__(
        self,
        settings: BatchingSettings,
        run_batch: RunBatch,
        observer: BatchObserver | None = None,
        name: str = "model",
    ) -> None:
        settings.validate()
        self.settings = settings
        self.name = name
        self._run_batch = run_batch
        self._observer = observer
        self._levels: list[collections.deque[_Job]] = [
            collections.deque() for _ in range(settings.priority_levels)
        ]
        self._queued = 0
        self._running = 0
        self._closing = False
        self._wake: asyncio.Event | None = None
        self._free: asyncio.Queue[int] | None = None
        self._scheduler: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._batches: set[asyncio.Task] = set()

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the scheduler on the running event loop."""
        self._wake = asyncio.Event()
        self._free = asyncio.Queue()
        for instance in range(self.settings.instance_count):
            self._free.put_nowait(instance)
        self._executor = ThreadPoolExecutor(
            max_workers=self.settings.instance_count, thread_name_prefix=f"{self.name}-instance"
        )
        self._scheduler = asyncio.create_task(self._schedule(), name=f"{self.name}-batcher")

    def begin_close(self) -> None:
        """Refuse new work from now on and run what is queued without waiting for more."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        """Refuse new work, finish every accepted request, then stop the workers."""
        self._closing = True
        if self._scheduler is None:
            return
        self._wake.set()
        await self._scheduler
        if self._batches:
            await asyncio.gather(*self._batches, return_exceptions=True)
        self._executor.shutdown(wait=True)
        self._scheduler = None

    @property
    def queued_requests(self) -> int:
        return self._queued

    @property
    def accepting(self) -> bool:
        return self._scheduler is not None and not self._closing

    # ---- submission ------------------------------------------------------------------------
    async def submit(
        self,
        payload: Any,
        rows: int = 1,
        length: int = 0,
        shape_key: Hashable = None,
        priority: int = 0,
        timeout_us: int | None = None,
    ) -> Any:
        """Queue one request and wait for its result.

        ``length`` is the request's token length (for length-aware grouping; 0 disables it
        for this request); requests only share a batch when their ``shape_key`` is equal.
        ``priority`` 0 means the default level. If the caller is cancelled (its client went
        away) the request is dropped from the queue.
        """
        settings = self.settings
        if self._closing or self._scheduler is None:
            raise BatcherClosedError("the server is shutting down")
        if not 1 <= rows <= settings.max_batch_size:
            raise InvalidRequestError(
                f"request has {rows} rows; this model takes 1 to {settings.max_batch_size}"
            )
        level = priority or settings.default_priority_level
        if not 1 <= level <= settings.priority_levels:
            raise InvalidRequestError(
                f"priority {priority} outside 1..{settings.priority_levels} (0 = default)"
            )
        if settings.max_queue_size and self._queued >= settings.max_queue_size:
            raise QueueFullError(
                f"queue full ({settings.max_queue_size} requests waiting); retry later"
            )
        timeout = settings.default_timeout_us
        if timeout_us is not None and (settings.allow_timeout_override or not timeout):
            timeout = timeout_us
        now = time.monotonic()
        job = _Job(
            payload=payload,
            rows=rows,
            length=length,
            shape_key=shape_key,
            priority=level,
            enqueued=now,
            deadline=now + timeout / 1e6 if timeout else None,
            future=asyncio.get_running_loop().create_future(),
        )
        self._levels[level - 1].append(job)
        self._queued += 1
        self._report_queue()
        self._wake.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.future.cancel()  # the scheduler skips it if it is still queued
            raise

    # ---- scheduling ------------------------------------------------------------------------
    def _report_queue(self) -> None:
        if self._observer is not None:
            self._observer.queue_size(self._queued)

    def _prune(self, now: float) -> None:
        """Drop cancelled requests and fail the ones whose timeout passed."""
        for level in self._levels:
            if not level:
                continue
            kept = collections.deque()
            for job in level:
                if job.future.done():
                    continue
                if job.deadline is not None and now >= job.deadline:
                    waited_ms = (now - job.enqueued) * 1e3
                    job.future.set_exception(
                        RequestTimeoutError(f"request timed out after {waited_ms:.1f} ms in queue")
                    )
                    continue
                kept.append(job)
            level.clear()
            level.extend(kept)
        queued = sum(len(level) for level in self._levels)
        if queued != self._queued:
            self._queued = queued
            self._report_queue()

    def _compatible(self, head: _Job, low: int, high: int, job: _Job) -> tuple[int, int] | None:
        if job.shape_key != head.shape_key:
            return None
        if not (self.settings.length_aware and head.length and job.length):
            return low, high
        low, high = min(low, job.length), max(high, job.length)
        return (low, high) if high <= self.settings.length_bucket_ratio * low else None

    def _candidates(self) -> list[_Job]:
        """The batch the queue offers now: head first, then compatible jobs in order."""
        head = next(level[0] for level in self._levels if level)
        batch, rows = [head], head.rows
        low = high = head.length
        limit = self.settings.max_batch_size
        for level in self._levels:
            for job in level:
                if rows == limit:
                    return batch
                if job is head or rows + job.rows > limit:
                    continue
                bounds = self._compatible(head, low, high, job)
                if bounds is not None:
                    low, high = bounds
                    batch.append(job)
                    rows += job.rows
        return batch

    def _ready_batch(self, batch: list[_Job], now: float) -> list[_Job] | None:
        """The part of ``batch`` to run now, or None to keep waiting (Triton's rules)."""
        settings = self.settings
        rows = sum(job.rows for job in batch)
        if rows >= settings.max_batch_size or self._closing:
            return batch
        if settings.preferred_batch_sizes:
            total, best = 0, 0
            for count, job in enumerate(batch, start=1):
                total += job.rows
                if total in settings.preferred_batch_sizes:
                    best = count
            if best:
                return batch[:best]
        if now >= batch[0].enqueued + settings.max_queue_delay_us / 1e6:
            return batch
        return None

    def _next_wakeup(self, batch: list[_Job]) -> float:
        wakeup = batch[0].enqueued + self.settings.max_queue_delay_us / 1e6
        deadlines = [j.deadline for level in self._levels for j in level if j.deadline]
        return min([wakeup, *deadlines])

    async def _wait(self, until: float | None) -> None:
        self._wake.clear()
        timeout = None if until is None else max(until - time.monotonic(), 0.0)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            pass

    async def _schedule(self) -> None:
        while True:
            now = time.monotonic()
            self._prune(now)
            if not self._queued:
                if self._closing:
                    return
                await self._wait(None)
            elif self._free.empty():  # every instance busy: wake for a finish or a timeout
                deadlines = [j.deadline for level in self._levels for j in level if j.deadline]
                await self._wait(min(deadlines, default=None))
            else:
                batch = self._candidates()
                ready = self._ready_batch(batch, now)
                if ready is None:
                    await self._wait(self._next_wakeup(batch))
                else:
                    self._dispatch(self._free.get_nowait(), ready, now)

    def _dispatch(self, instance: int, batch: list[_Job], now: float) -> None:
        for job in batch:
            self._levels[job.priority - 1].remove(job)
        self._queued -= len(batch)
        self._report_queue()
        self._running += 1
        task = asyncio.create_task(self._execute(instance, batch, now))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _execute(self, instance: int, batch: list[_Job], started: float) -> None:
        loop = asyncio.get_running_loop()
        payloads = [job.payload for job in batch]
        queue_times = [started - job.enqueued for job in batch]
        begin = time.perf_counter()
        try:
            results = await loop.run_in_executor(
                self._executor, self._run_batch, instance, payloads
            )
            if len(results) != len(batch):
                raise RuntimeError(f"model returned {len(results)} results for {len(batch)}")
        except Exception as exc:  # the model failed: every request in the batch gets the error
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
        else:
            for job, result in zip(batch, results, strict=True):
                if not job.future.done():  # a client that left is simply not answered
                    job.future.set_result(result)
        finally:
            compute = time.perf_counter() - begin
            if self._observer is not None:
                self._observer.batch_done(sum(j.rows for j in batch), compute, queue_times)
            self._running -= 1
            self._free.put_nowait(instance)
            self._wake.set()
