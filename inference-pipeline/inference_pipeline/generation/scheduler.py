"""The continuous engine's scheduler: who runs in the next iteration and on how many tokens.

Policy (vLLM's, with chunked prefill), one call per iteration:

1. **Every running decode first**, oldest admission first: one token each. A decode that
   crosses a block boundary takes a block; when none is free, the most recently admitted
   running sequence is **preempted** (recompute: its blocks are released and it goes back to
   the head of the waiting queue with its generated tokens kept, to be prefilled again, prompt
   and generated tokens, when it is readmitted). A preempted sequence's own cached blocks
   usually survive in the prefix cache, so recomputing it is mostly a prefix hit.
2. **Prefill chunks up to the token budget**: ``max_num_batched_tokens`` minus the decodes,
   first for running sequences still prefilling, then for waiting ones, admitted first come,
   first served while fewer than ``max_num_seqs`` run and blocks allow. A new sequence starts
   on the longest cached prefix of its tokens (prefix caching) and prefills only the rest.
   No admission happens in an iteration that preempted (it would take the blocks back).
3. **Admission delay** (vLLM's ``scheduler_delay_factor``): with ``admission_delay_factor``
   ``f > 0`` new requests are admitted only when the oldest one waiting has waited at least
   ``f`` x the last prefill iteration's latency, or when nothing runs. Newcomers then
   arrive in bursts of consecutive prefill iterations instead of one spread among every few
   decode iterations; while they are held the batch runs fewer rows. Each newcomer's first
   token comes later (and its slot idles meanwhile). ``f = 0`` admits at every iteration.

The budget is the knob that trades time to first token against inter-token latency: a
small budget bounds how much prefill work lands between two tokens of a running stream; a
large one admits and prefills new requests faster. ``max_num_seqs`` caps the decode batch.

``reserve_up_front`` is the baseline allocation: a sequence is admitted only when blocks for
``prompt + max_new_tokens`` are free and takes them all at once (never preempted, never
sharing a prefix). On demand fits more running sequences in the same memory.

The scheduler decides; the block manager (``PagedKVCache``) only counts and moves blocks.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inference_pipeline.generation.paged_cache import PagedKVCache
from inference_pipeline.generation.requests import RequestHandle

# Free blocks an admission must leave (vLLM's watermark): admitting into the very last blocks
# would preempt the newcomer at the next block boundary of any running sequence.
WATERMARK_SHARE = 0.01


class SequenceState:
    """A request inside the continuous engine: its tokens so far and its place in the cache."""

    def __init__(self, handle: RequestHandle, queued_at: float) -> None:
        self.handle = handle
        self.id = handle.id
        self.admitted = 0  # admission order (higher = more recent); 0 while waiting
        self.queued_at = queued_at  # the scheduler's clock at submit (kept when preempted)

    def known(self) -> list[int]:
        """Every token of the sequence: the prompt, then what it generated."""
        return [*self.handle.request.prompt, *self.handle.tokens]


@dataclass
class Plan:
    """One iteration: decode these, prefill those (sequence, token count)."""

    decode: list[SequenceState] = field(default_factory=list)
    prefill: list[tuple[SequenceState, int]] = field(default_factory=list)
    preempted: list[SequenceState] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill)


@dataclass
class SchedulerStats:
    preemptions: int = 0
    prefix_queried_tokens: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hit_tokens: int = 0  # of which served from cached blocks
    peak_running: int = 0
    held_admissions: int = 0  # iterations whose waiting requests the admission delay held


class TokenBudgetScheduler:
    def __init__(
        self,
        cache: PagedKVCache,
        lock: threading.RLock,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 64,
        reserve_up_front: bool = False,
        admission_delay_factor: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_num_seqs < 1 or max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"need max_num_seqs >= 1 and max_num_batched_tokens >= max_num_seqs (every "
                f"running decode fits one step), got {max_num_seqs}, {max_num_batched_tokens}"
            )
        if not admission_delay_factor >= 0:  # also refuses NaN
            raise ValueError(f"need admission_delay_factor >= 0, got {admission_delay_factor}")
        self.cache = cache
        self.lock = lock  # guards ``waiting`` (submit runs on other threads)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.reserve_up_front = reserve_up_front
        self.admission_delay_factor = admission_delay_factor
        self.clock = clock  # seconds; the admission delay's time base
        # The latency of the last iteration that carried a prefill chunk: from the schedule()
        # call that planned it to the next one (vLLM's "previous prompt latency").
        self.last_prefill_latency = 0.0
        self._prefill_planned_at: float | None = None
        self.waiting: collections.deque[SequenceState] = collections.deque()
        self.running: list[SequenceState] = []  # admission order, oldest first
        self.stats = SchedulerStats()
        self._admissions = 0
        self._watermark = int(WATERMARK_SHARE * cache.num_blocks)

    # ---- state ----------------------------------------------------------------------------
    def enqueue(self, handle: RequestHandle) -> None:
        """A submitted request joins the back of the waiting queue (the caller holds ``lock``)."""
        self.waiting.append(SequenceState(handle, self.clock()))

    def computed(self, seq: SequenceState) -> int:
        return self.cache.lengths.get(seq.id, 0)

    def remaining(self, seq: SequenceState) -> int:
        """Tokens still to feed before the sequence's next token can be sampled."""
        return len(seq.handle.request.prompt) + len(seq.handle.tokens) - self.computed(seq)

    def decoding(self, seq: SequenceState) -> bool:
        return bool(seq.handle.tokens) and self.remaining(seq) == 1

    def release(self, seq: SequenceState) -> None:
        """A finished or cancelled sequence leaves; its blocks go back to the pool."""
        self.cache.release(seq.id)
        self.running.remove(seq)

    # ---- the policy -----------------------------------------------------------------------
    def schedule(self, prefill: bool = True) -> Plan:
        """The next iteration's plan. ``prefill=False`` plans the running decodes only (no
        chunk, no admission): the engine asks for that while a prefill pass is still in
        flight, since its sequences' chunks are not in the cache yet."""
        now = self.clock()
        if self._prefill_planned_at is not None:
            self.last_prefill_latency = now - self._prefill_planned_at
        plan = Plan()
        lengths, tables, bs = self.cache.lengths, self.cache.tables, self.cache.block_size
        prefilling = []  # running sequences not decoding, in admission order
        # One visit per running sequence (this loop runs every iteration, for every stream).
        # A copy: a preemption removes its victim from ``running`` (the youngest, maybe one
        # already visited).
        for seq in list(self.running):
            if plan.preempted and seq in plan.preempted:
                continue
            if not self.decoding(seq):
                prefilling.append(seq)
                continue
            computed = lengths[seq.id]
            if computed < len(tables[seq.id]) * bs:  # its next token fits the blocks it holds
                plan.decode.append(seq)
            elif self._make_room(seq, computed + 1, plan):
                self.cache.ensure(seq.id, computed + 1)
                plan.decode.append(seq)
        if not prefill:
            self.stats.peak_running = max(self.stats.peak_running, len(self.running))
            self._prefill_planned_at = None
            return plan
        budget = self.max_num_batched_tokens - len(plan.decode)
        for seq in prefilling:
            if plan.preempted and seq in plan.preempted:
                continue
            room = self.room(plan, budget)
            if room == 0:
                break
            count = self._chunk(seq, room)
            if count:
                plan.prefill.append((seq, count))
        if not plan.preempted:
            if self.admission_due(now):
                self._admit(plan, budget)
            else:
                self.stats.held_admissions += 1
        if not plan and self.running:  # every running prefill is out of blocks: free some
            self._preempt(self.running[-1], plan)
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        self._prefill_planned_at = now if plan.prefill else None
        return plan

    def admission_due(self, now: float) -> bool:
        """Whether waiting requests may be admitted at ``now``: always when the delay factor is
        0; otherwise once nothing runs or once the oldest has waited ``factor`` x the last
        prefill iteration's latency. (Not as soon as the waiting requests fill the free slots:
        under a closed loop at full concurrency each finished stream's slot is refilled by
        one newcomer, which that rule would admit alone, at once, every time.)"""
        if self.admission_delay_factor == 0 or not self.running:
            return True
        with self.lock:
            if not self.waiting:
                return True  # nothing to hold
            oldest = min(seq.queued_at for seq in self.waiting)
        return now - oldest >= self.admission_delay_factor * self.last_prefill_latency

    @staticmethod
    def room(plan: Plan, budget: int) -> int:
        """The most tokens one more prefill chunk may take. The prefill pass is one padded
        batch, ``chunks x longest chunk`` token slots, and costs per slot, so the budget
        bounds the padded size: 0 when one more row would pad the pass past ``budget``."""
        longest = max((n for _, n in plan.prefill), default=0)
        share = budget // (len(plan.prefill) + 1)
        return share if share >= longest else 0

    def _make_room(self, seq: SequenceState, tokens: int, plan: Plan) -> bool:
        """Preempt the most recent sequences until ``seq`` can hold ``tokens``; False when
        ``seq`` itself was the one preempted."""
        while self.cache.missing_blocks(seq.id, tokens) > self.cache.free_blocks:
            victim = self.running[-1]
            self._preempt(victim, plan)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: SequenceState, plan: Plan) -> None:
        self.cache.release(seq.id)
        self.running.remove(seq)
        if seq in plan.decode:
            plan.decode.remove(seq)
        plan.prefill = [(s, n) for s, n in plan.prefill if s is not seq]
        plan.preempted.append(seq)
        seq.admitted = 0
        with self.lock:
            self.waiting.appendleft(seq)  # older victims are preempted later: they go first
        self.stats.preemptions += 1

    def _chunk(self, seq: SequenceState, budget: int) -> int:
        """Take blocks for the next prefill chunk (at most ``budget`` tokens, as many as the
        free blocks hold); returns its size."""
        computed = self.computed(seq)
        capacity = len(self.cache.tables.get(seq.id, ())) + self.cache.free_blocks
        count = min(budget, self.remaining(seq), capacity * self.cache.block_size - computed)
        if count <= 0:
            return 0
        self.cache.ensure(seq.id, computed + count)
        return count

    def _admit(self, plan: Plan, budget: int) -> None:
        while (room := self.room(plan, budget)) > 0 and len(self.running) < self.max_num_seqs:
            with self.lock:
                seq = self.waiting[0] if self.waiting else None
            if seq is None:
                return
            handle = seq.handle
            if handle.cancel_requested.is_set():
                with self.lock:
                    self.waiting.popleft()
                handle.finish("cancelled")
                continue
            known = seq.known()
            if self.reserve_up_front:
                total = len(handle.request.prompt) + handle.request.max_new_tokens
                if not self.cache.can_reserve(total):
                    return  # first come, first served: wait for blocks
                self.cache.ensure(seq.id, total)
            else:
                blocks = self.cache.match_prefix(known)
                hit = self.cache.share_prefix(seq.id, known, blocks)
                need = self.cache.missing_blocks(seq.id, hit + min(room, len(known) - hit))
                reserve = self._watermark if self.running else 0
                if need and need + reserve > self.cache.free_blocks:
                    self.cache.release(seq.id)  # its shared blocks stay cached
                    return
                self.stats.prefix_queried_tokens += len(known)
                self.stats.prefix_hit_tokens += hit
            count = self._chunk(seq, room)
            with self.lock:
                self.waiting.popleft()
            self._admissions += 1
            seq.admitted = self._admissions
            if handle.admitted_at is None:
                handle.admitted_at = time.perf_counter()
            self.running.append(seq)
            plan.prefill.append((seq, count))
