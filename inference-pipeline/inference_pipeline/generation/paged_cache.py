"""A paged KV cache in NumPy: fixed-size blocks preallocated once, a block table per sequence,
blocks taken on demand, shared through an automatic prefix cache.

Every layer's keys and values live in two arrays [L, num_blocks, H, block_size, D] allocated
at start-up; a sequence owns a list of block ids (its block table), so memory never fragments:
any free block serves any sequence. Against one contiguous cache per request sized for the
longest possible sequence, the waste per sequence is under one block.

**On demand.** ``ensure(seq, tokens)`` grows a table only to what the tokens written so far
need, so a sequence takes a block when it crosses a block boundary, not its whole
``prompt + max_new_tokens`` at admission. When none is free the scheduler preempts.

**Prefix caching** (vLLM's automatic prefix caching). A block that fills up is keyed by
``hash((key of the previous block, its tokens))``, so a key names the whole prefix up to the
block's end. ``match_prefix(tokens)`` walks a new prompt's full blocks through that map and
hands back the longest run of cached blocks, which the new sequence shares (reference counts)
instead of prefilling. A block nobody references keeps its keys/values and its key: it is
"evictable", reused for a new sequence's prefix if it is asked for again, or reclaimed, least
recently used first, when the pool has no never-cached free block left.

**Copy-on-write.** Prefix sharing only ever shares full blocks and a sequence only writes
past its own length, so it never writes into a shared full block. ``fork`` (one sequence
continued two ways, as for ``n > 1`` or beam search) also shares the partial last block;
the first write to a block whose reference count is above one copies it first.

``check()`` proves the accounting: every block is free, evictable or referenced, and a
referenced block's count equals the number of tables holding it.

The step graph reads a dense past [B, H, P, D]; the engines keep that dense copy per row
(``dense_past.py``), and ``read`` copies a sequence's blocks into it only when the sequence
starts on cached blocks (a prefix hit, a preempted sequence back), which are full blocks. So a
decode step records its tokens without their keys/values (``advance_one_each``) and the
engine writes a block from the dense row when the block fills (``write_block``): per token it
touches no block, and every full block, the only kind a lookup can return, holds its data.
A running sequence's partial last block is stale in the pool until it fills (a preempted
sequence recomputes it). A paged-attention kernel (vLLM) would read the blocks in place instead.
"""

from __future__ import annotations

import collections

import numpy as np

from inference_pipeline.generation.model import GPTConfig

ROOT_KEY = 0  # the key "before" a sequence's first block


class OutOfBlocks(RuntimeError):
    """The pool cannot hold the requested tokens."""


def block_key(previous: int, tokens: tuple[int, ...]) -> int:
    """The prefix-cache key of a full block: its tokens and (through ``previous``) every
    token before it."""
    return hash((previous, tokens))


class PagedKVCache:
    def __init__(
        self,
        config: GPTConfig,
        num_blocks: int,
        block_size: int = 16,
        prefix_caching: bool = True,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        shape = (config.n_layer, num_blocks, config.n_head, block_size, config.head_dim)
        self.keys = np.empty(shape, dtype=np.float32)
        self.values = np.empty(shape, dtype=np.float32)
        for pool in (self.keys, self.values):  # touch every page now, not in a request's step
            pool.fill(0.0)
        self.config = config
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives low ids first
        # unreferenced blocks that still hold a cached prefix, least recently used first
        self._evictable: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._refs = [0] * num_blocks
        self._cached: dict[int, int] = {}  # prefix key -> block
        self._key_of: dict[int, int] = {}  # block -> its prefix key (full, cached blocks)
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}  # tokens written per sequence
        self.tokens: dict[int, list[int]] = {}  # token ids written per sequence (for keys)
        self._keys: dict[int, list[int]] = {}  # prefix key of each full block of a sequence
        self.peak_used_blocks = 0
        self.evictions = 0
        self.copies_on_write = 0

    # ---- accounting -----------------------------------------------------------------------
    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    @property
    def free_blocks(self) -> int:
        """Blocks a sequence can take now: never-cached ones and evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.free_blocks

    @property
    def usage(self) -> float:
        """Share of the pool referenced by sequences (vLLM's kv_cache_usage_perc, 0..1)."""
        return self.used_blocks / self.num_blocks

    def can_reserve(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.free_blocks

    def missing_blocks(self, seq_id: int, tokens: int) -> int:
        """Blocks ``seq_id`` still needs to hold ``tokens`` tokens in total."""
        return max(0, self.blocks_for(tokens) - len(self.tables.get(seq_id, ())))

    def _take(self) -> int:
        if self._free:
            block = self._free.pop()
        else:  # reclaim the least recently used cached block
            block, _ = self._evictable.popitem(last=False)
            del self._cached[self._key_of.pop(block)]
            self.evictions += 1
        self._refs[block] = 1
        return block

    def _open(self, seq_id: int) -> list[int]:
        if seq_id not in self.tables:
            self.tables[seq_id], self.lengths[seq_id] = [], 0
            self.tokens[seq_id], self._keys[seq_id] = [], []
        return self.tables[seq_id]

    def ensure(self, seq_id: int, tokens: int) -> None:
        """Grow ``seq_id``'s table to hold ``tokens`` tokens in total (a new sequence gets an
        empty table); raises OutOfBlocks, taking nothing, when the pool is short."""
        table = self._open(seq_id)
        missing = self.blocks_for(tokens) - len(table)
        if missing <= 0:
            return
        if missing > self.free_blocks:
            if not table and not self.lengths[seq_id]:
                self._close(seq_id)
            raise OutOfBlocks(
                f"sequence {seq_id} needs {missing} more blocks, {self.free_blocks} free"
            )
        table.extend(self._take() for _ in range(missing))
        self.peak_used_blocks = max(self.peak_used_blocks, self.used_blocks)

    def match_prefix(self, tokens: bytes | list[int]) -> list[int]:
        """Cached blocks holding the longest prefix of ``tokens`` made of whole blocks, leaving
        at least one token to compute (its logits give the next token). Touches nothing."""
        if not self.prefix_caching:
            return []
        found, key, bs = [], ROOT_KEY, self.block_size
        for start in range(0, len(tokens) - 1 - (bs - 1), bs):
            key = block_key(key, tuple(tokens[start : start + bs]))
            block = self._cached.get(key)
            if block is None:
                break
            found.append(block)
        return found

    def share_prefix(self, seq_id: int, tokens: bytes | list[int], blocks: list[int]) -> int:
        """Start ``seq_id`` on the cached ``blocks`` (from ``match_prefix(tokens)``); returns
        the tokens it no longer has to prefill."""
        table = self._open(seq_id)
        assert not table, f"sequence {seq_id} already holds blocks"
        for block in blocks:
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1
            table.append(block)
            self._keys[seq_id].append(self._key_of[block])
        count = len(blocks) * self.block_size
        self.lengths[seq_id] = count
        self.tokens[seq_id] = list(tokens[:count])
        self.peak_used_blocks = max(self.peak_used_blocks, self.used_blocks)
        return count

    def fork(self, parent: int, child: int) -> None:
        """``child`` continues ``parent``: it shares every block (the partial last one too);
        whichever writes into a shared block first copies it."""
        assert child not in self.tables, f"sequence {child} exists"
        self.tables[child] = list(self.tables[parent])
        for block in self.tables[child]:
            self._refs[block] += 1
        self.lengths[child] = self.lengths[parent]
        self.tokens[child] = list(self.tokens[parent])
        self._keys[child] = list(self._keys[parent])

    def release(self, seq_id: int) -> int:
        """Drop the sequence's references; returns how many blocks it held. A block whose count
        falls to 0 becomes evictable when it holds a cached prefix, free otherwise."""
        table = self.tables.get(seq_id, [])
        for block in reversed(table):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._key_of:
                    self._evictable[block] = None  # most recently used at the end
                else:
                    self._free.append(block)
        self._close(seq_id)
        return len(table)

    def _close(self, seq_id: int) -> None:
        for store in (self.tables, self.lengths, self.tokens, self._keys):
            store.pop(seq_id, None)

    def check(self) -> None:
        """Raise AssertionError unless every block is exactly one of free, evictable (cached,
        unreferenced) or referenced, with its count equal to the tables holding it."""
        holders = collections.Counter(b for t in self.tables.values() for b in t)
        free, evictable = set(self._free), set(self._evictable)
        assert len(free) == len(self._free), "a block is free twice"
        assert not free & evictable, "a block is both free and evictable"
        for block in range(self.num_blocks):
            refs = self._refs[block]
            assert refs == holders.get(block, 0), f"block {block}: {refs} refs, {holders[block]}"
            if refs:
                assert block not in free and block not in evictable, f"block {block} is in use"
            else:
                assert (block in free) != (block in evictable), f"block {block} is lost"
            assert (block in evictable) <= (block in self._key_of), f"block {block} has no key"
        assert all(self._cached[k] == b for b, k in self._key_of.items()), "prefix map broken"
        assert len(self._cached) == len(self._key_of), "prefix map broken"
        for seq_id, length in self.lengths.items():
            assert length <= len(self.tables[seq_id]) * self.block_size, (
                f"sequence {seq_id} overflows"
            )
            assert len(self.tokens[seq_id]) == length, f"sequence {seq_id}: token count"
            assert len(self.tables[seq_id]) == len(set(self.tables[seq_id])), "block twice"

    # ---- data -----------------------------------------------------------------------------
    def _writable(self, seq_id: int, index: int) -> int:
        """The block at ``index`` of ``seq_id``'s table, copied first when it is shared."""
        table = self.tables[seq_id]
        block = table[index]
        if self._refs[block] > 1:
            fresh = self._take()
            self.keys[:, fresh] = self.keys[:, block]
            self.values[:, fresh] = self.values[:, block]
            self._refs[block] -= 1
            table[index] = block = fresh
            self.copies_on_write += 1
            self.peak_used_blocks = max(self.peak_used_blocks, self.used_blocks)
        return block

    def _written(self, seq_id: int, tokens: list[int]) -> None:
        """Record written token ids; key (and cache) every block that just became full."""
        seq_tokens, keys, bs = self.tokens[seq_id], self._keys[seq_id], self.block_size
        seq_tokens.extend(tokens)
        self.lengths[seq_id] = len(seq_tokens)
        while len(keys) < len(seq_tokens) // bs:
            index = len(keys)
            previous = keys[-1] if keys else ROOT_KEY
            key = block_key(previous, tuple(seq_tokens[index * bs : (index + 1) * bs]))
            keys.append(key)
            block = self.tables[seq_id][index]
            if self.prefix_caching and key not in self._cached and block not in self._key_of:
                self._cached[key], self._key_of[block] = block, key

    def append(self, seq_id: int, tokens: list[int], keys: np.ndarray, values: np.ndarray) -> None:
        """Write new tokens (ids and keys/values, each [L, H, T, D]) after the sequence's
        cached ones; the table must already hold them (``ensure``)."""
        start, count = self.lengths[seq_id], keys.shape[2]
        table = self.tables[seq_id]
        if start + count > len(table) * self.block_size:
            raise OutOfBlocks(f"sequence {seq_id}: {start + count} tokens exceed its blocks")
        done = 0
        while done < count:  # one slice per block touched
            position = start + done
            offset = position % self.block_size
            block = self._writable(seq_id, position // self.block_size)
            take = min(count - done, self.block_size - offset)
            self.keys[:, block, :, offset : offset + take] = keys[:, :, done : done + take]
            self.values[:, block, :, offset : offset + take] = values[:, :, done : done + take]
            done += take
        self._written(seq_id, list(tokens))

    def advance_one_each(self, seq_ids: list[int], tokens: list[int]) -> list[tuple[int, int]]:
        """Decode's bookkeeping, one new token per sequence, whose keys/values the caller keeps
        (in its dense rows): returns ``(sequence, block)`` for every block this token filled,
        keyed in the prefix cache now, whose data the caller writes (``write_block``) before
        anything looks a block up. A filled block shared with a fork is copied first."""
        filled, bs = [], self.block_size
        for seq_id, token in zip(seq_ids, tokens, strict=True):
            position, table = self.lengths[seq_id], self.tables[seq_id]
            index = position // bs
            if index >= len(table):
                raise OutOfBlocks(f"sequence {seq_id}: {position + 1} tokens exceed its blocks")
            if position - index * bs == bs - 1:  # the token fills its block: key it
                filled.append((seq_id, self._writable(seq_id, index)))
                self._written(seq_id, [token])
            else:
                self.tokens[seq_id].append(token)
                self.lengths[seq_id] += 1
        return filled

    def write_block(self, block: int, keys: np.ndarray, values: np.ndarray) -> None:
        """A full block's keys and values, each ``[L, H, block_size, D]``."""
        self.keys[:, block] = keys
        self.values[:, block] = values

    def read(self, seq_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The sequence's cached keys and values, each ``[L, H, length, D]`` (a copy)."""
        length, table = self.lengths[seq_id], self.tables[seq_id]
        used = table[: self.blocks_for(length)]
        c = self.config
        out = []
        for pool in (self.keys, self.values):
            blocks = pool[:, used]  # [L, n, H, bs, D]
            dense = blocks.transpose(0, 2, 1, 3, 4).reshape(c.n_layer, c.n_head, -1, c.head_dim)
            out.append(dense[:, :, :length])
        return out[0], out[1]
