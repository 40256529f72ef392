"""The dynamic batcher alone, with a fake model: Triton's rules, length grouping, overload."""

from __future__ import annotations

import asyncio
import threading
import time

import inference_pipeline.serving.batcher as batcher_module
import pytest
from inference_pipeline.serving.batcher import (
    BatcherClosedError,
    DynamicBatcher,
    InvalidRequestError,
    QueueFullError,
    RequestTimeoutError,
)
from inference_pipeline.serving.config import BatchingSettings


class FakeModel:
    """Records every batch; ``gate`` (if cleared) holds the instance busy."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def run_batch(self, instance: int, payloads: list) -> list:
        self.started.set()
        self.gate.wait(timeout=10)
        self.batches.append(list(payloads))
        if "boom" in payloads:
            raise RuntimeError("model failed")
        return [f"out-{p}" for p in payloads]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


async def started_batcher(model: FakeModel, **settings) -> DynamicBatcher:
    batcher = DynamicBatcher(BatchingSettings(**settings), model.run_batch)
    await batcher.start()
    return batcher


async def occupy(batcher: DynamicBatcher, model: FakeModel) -> asyncio.Task:
    """Hold the only instance busy with one request until ``model.gate`` is set."""
    model.gate.clear()
    model.started.clear()
    task = asyncio.create_task(batcher.submit("blocker"))
    while not model.started.is_set():
        await asyncio.sleep(0.001)
    return task


class FrozenClock:
    """The batcher's clock, moved only by the test: a queue delay can expire only when the
    test says so, so what the batcher does is decided by its rules, not by how busy the
    machine is."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def perf_counter() -> float:
        return time.perf_counter()


@pytest.fixture
def clock(monkeypatch) -> FrozenClock:
    frozen = FrozenClock()
    monkeypatch.setattr(batcher_module, "time", frozen)
    return frozen


async def until_queued(batcher: DynamicBatcher, requests: int) -> None:
    while batcher.queued_requests < requests:
        await asyncio.sleep(0.001)


def test_queue_delay_counts_from_the_oldest_request(clock):
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=8, max_queue_delay_us=1_000_000)
        first = asyncio.create_task(batcher.submit("a"))
        await until_queued(batcher, 1)
        clock.now += 0.9
        second = asyncio.create_task(batcher.submit("b"))
        await until_queued(batcher, 2)
        await asyncio.sleep(0.02)  # the scheduler looks at the queue: 0.9 s < the 1 s delay
        waiting = (list(model.batches), batcher.queued_requests)
        # 1.5 s after "a", 0.6 s after "b": only a delay counted from "a" has expired. Counted
        # from "b" the batcher would wait for a clock that never moves (run()'s timeout fails).
        clock.now += 0.6
        assert await first == "out-a" and await second == "out-b"
        await batcher.close()
        return waiting, model.batches

    waiting, batches = run(scenario())
    assert waiting == ([], 2)
    assert batches == [["a", "b"]]


def test_preferred_batch_size_dispatches_without_waiting(clock):
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(
            model, max_batch_size=8, preferred_batch_sizes=(3,), max_queue_delay_us=5_000_000
        )
        # the clock never moves: only the preferred size can dispatch these
        results = await asyncio.gather(*(batcher.submit(i) for i in range(3)))
        await batcher.close()
        return model.batches, results

    batches, results = run(scenario())
    assert batches == [[0, 1, 2]] and results == ["out-0", "out-1", "out-2"]


def test_max_batch_size_and_multi_row_requests():
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=4)
        blocker = await occupy(batcher, model)
        tasks = [asyncio.create_task(batcher.submit(f"r{i}", rows=2)) for i in range(5)]
        await asyncio.sleep(0.02)
        with pytest.raises(InvalidRequestError):
            await batcher.submit("too-big", rows=5)
        model.gate.set()
        await asyncio.gather(blocker, *tasks)
        await batcher.close()
        return model.batches

    batches = run(scenario())
    assert batches[0] == ["blocker"]
    assert [len(b) for b in batches[1:]] == [2, 2, 1]  # 2 rows each, 4 rows per batch


def test_full_queue_rejects_at_once_and_accepted_work_completes():
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=2, max_queue_size=3)
        blocker = await occupy(batcher, model)
        accepted = [asyncio.create_task(batcher.submit(i)) for i in range(3)]
        await until_queued(batcher, 3)
        # rejected while the only instance is still blocked: a submit that waited for room
        # would never return (the gate opens only after it)
        with pytest.raises(QueueFullError, match="queue full"):
            await batcher.submit("one too many")
        state = (list(model.batches), batcher.queued_requests)
        model.gate.set()
        results = await asyncio.gather(blocker, *accepted)
        await batcher.close()
        return results, state

    results, state = run(scenario())
    assert state == ([], 3)
    assert results == ["out-blocker", "out-0", "out-1", "out-2"]


def test_timeout_while_queued_and_priority_order():
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=1, priority_levels=2,
                                        default_priority_level=2)  # fmt: skip
        blocker = await occupy(batcher, model)
        low = asyncio.create_task(batcher.submit("low"))
        expiring = asyncio.create_task(batcher.submit("late", timeout_us=20_000))
        high = asyncio.create_task(batcher.submit("high", priority=1))
        with pytest.raises(RequestTimeoutError, match="timed out"):
            await expiring
        with pytest.raises(InvalidRequestError, match="priority"):
            await batcher.submit("x", priority=3)
        model.gate.set()
        await asyncio.gather(blocker, low, high)
        await batcher.close()
        return model.batches

    assert run(scenario()) == [["blocker"], ["high"], ["low"]]


def test_length_aware_batches_group_similar_lengths():
    async def scenario(length_aware: bool):
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=4, length_aware=length_aware,
                                        length_bucket_ratio=2.0)  # fmt: skip
        blocker = await occupy(batcher, model)
        lengths = [4, 100, 6, 120, 5, 90]
        tasks = [asyncio.create_task(batcher.submit(n, length=n)) for n in lengths]
        await asyncio.sleep(0.01)
        model.gate.set()
        await asyncio.gather(blocker, *tasks)
        await batcher.close()
        return model.batches[1:]

    assert run(scenario(True)) == [[4, 6, 5], [100, 120, 90]]
    assert run(scenario(False)) == [[4, 100, 6, 120], [5, 90]]


def test_cancelled_request_is_dropped_and_others_still_answered():
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=4)
        blocker = await occupy(batcher, model)
        keep = asyncio.create_task(batcher.submit("keep"))
        gone = asyncio.create_task(batcher.submit("gone"))
        await asyncio.sleep(0.01)
        gone.cancel()
        model.gate.set()
        results = await asyncio.gather(blocker, keep)
        await batcher.close()
        return model.batches, results

    batches, results = run(scenario())
    assert results == ["out-blocker", "out-keep"] and batches[1] == ["keep"]


def test_model_error_reaches_every_request_of_the_batch_only():
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=2)
        blocker = await occupy(batcher, model)
        tasks = [asyncio.create_task(batcher.submit(p)) for p in ("ok", "boom", "after")]
        await asyncio.sleep(0.01)
        model.gate.set()
        results = await asyncio.gather(blocker, *tasks, return_exceptions=True)
        await batcher.close()
        return results

    results = run(scenario())
    assert isinstance(results[1], RuntimeError) and isinstance(results[2], RuntimeError)
    assert results[3] == "out-after"


def test_close_finishes_accepted_requests_then_refuses(clock):
    async def scenario():
        model = FakeModel()
        batcher = await started_batcher(model, max_batch_size=2, max_queue_delay_us=10_000_000)
        tasks = [asyncio.create_task(batcher.submit(i)) for i in range(5)]
        await asyncio.sleep(0)  # every task has submitted its request
        await batcher.close()  # the clock never moves: a close that waited the delay hangs
        with pytest.raises(BatcherClosedError):
            await batcher.submit("late")
        return await asyncio.gather(*tasks)

    assert run(scenario()) == [f"out-{i}" for i in range(5)]


def test_parallel_instances_run_batches_concurrently():
    async def scenario():
        barrier = threading.Barrier(2, timeout=5)

        def run_batch(instance: int, payloads: list) -> list:
            barrier.wait()  # only passes if two instances run at the same time
            return [instance] * len(payloads)

        batcher = DynamicBatcher(BatchingSettings(max_batch_size=1, instance_count=2), run_batch)
        await batcher.start()
        results = await asyncio.gather(batcher.submit("a"), batcher.submit("b"))
        await batcher.close()
        return results

    assert sorted(run(scenario())) == [0, 1]
