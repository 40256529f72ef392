"""A paged KV cache in NumPy: fixed-size blocks preallocated once, a block table per sequence.

Every layer's keys and values live in two arrays [L, num_blocks, H, block_size, D] allocated
at start-up; a sequence owns a list of block ids (its block table), so memory never fragments:
any free block serves any sequence, and a finished or cancelled sequence returns its blocks in
O(blocks). Against one contiguous cache per request sized for the longest possible sequence,
the waste per sequence is under one block instead of ``max_positions - length`` slots.

The step graph takes a dense past [B, H, P, D], so ``gather`` copies the batch's blocks into
one padded array per step; a paged-attention kernel (vLLM) reads the blocks in place instead.
"""

from __future__ import annotations

import numpy as np

from inference_pipeline.generation.model import GPTConfig


class OutOfBlocks(RuntimeError):
    """The pool cannot hold the requested tokens."""


class PagedKVCache:
    def __init__(self, config: GPTConfig, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        shape = (config.n_layer, num_blocks, config.n_head, block_size, config.head_dim)
        self.keys = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)
        self.config = config
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives low ids first
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.peak_used_blocks = 0
        # Reused gather buffers: a fresh multi-MB array per step costs more in page faults than
        # the copy itself. Views into them are valid until the next gather.
        self._buffers: dict[tuple[int, str], np.ndarray] = {}

    # ---- accounting -----------------------------------------------------------------------
    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return sum(len(t) for t in self.tables.values())

    def can_reserve(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= len(self._free)

    def reserve(self, seq_id: int, tokens: int) -> None:
        """Give ``seq_id`` enough blocks for ``tokens`` tokens in total (prompt + generation)."""
        table = self.tables.setdefault(seq_id, [])
        self.lengths.setdefault(seq_id, 0)
        missing = self.blocks_for(tokens) - len(table)
        if missing > len(self._free):
            if not table:
                del self.tables[seq_id], self.lengths[seq_id]
            raise OutOfBlocks(
                f"sequence {seq_id} needs {missing} more blocks, {len(self._free)} free"
            )
        table.extend(self._free.pop() for _ in range(max(0, missing)))
        self.peak_used_blocks = max(self.peak_used_blocks, self.num_blocks - len(self._free))

    def release(self, seq_id: int) -> int:
        """Return the sequence's blocks to the pool; returns how many were freed."""
        table = self.tables.pop(seq_id, [])
        self.lengths.pop(seq_id, None)
        self._free.extend(reversed(table))
        return len(table)

    def check(self) -> None:
        """Raise AssertionError unless every block is either free or owned by exactly one table."""
        owned = [b for t in self.tables.values() for b in t]
        every = sorted(owned + self._free)
        assert every == list(range(self.num_blocks)), "block accounting is broken"
        for seq_id, length in self.lengths.items():
            assert length <= len(self.tables[seq_id]) * self.block_size, (
                f"sequence {seq_id} overflows"
            )

    # ---- data -----------------------------------------------------------------------------
    def append(self, seq_id: int, keys: np.ndarray, values: np.ndarray) -> None:
        """Write new tokens' keys/values, each [L, H, T, D], after the sequence's cached ones."""
        start, count = self.lengths[seq_id], keys.shape[2]
        table = self.tables[seq_id]
        if start + count > len(table) * self.block_size:
            raise OutOfBlocks(f"sequence {seq_id}: {start + count} tokens exceed its reservation")
        done = 0
        while done < count:  # one slice per block touched
            position = start + done
            block, offset = table[position // self.block_size], position % self.block_size
            take = min(count - done, self.block_size - offset)
            self.keys[:, block, :, offset : offset + take] = keys[:, :, done : done + take]
            self.values[:, block, :, offset : offset + take] = values[:, :, done : done + take]
            done += take
        self.lengths[seq_id] = start + count

    def _buffer(self, kind: int, role: str, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        flat = self._buffers.get((kind, role))
        if flat is None or flat.size < size:
            flat = self._buffers[(kind, role)] = np.empty(
                max(size, 2 * (0 if flat is None else flat.size)), np.float32
            )
        return flat[:size].reshape(shape)

    def _gather_pool(self, pool: np.ndarray, table: np.ndarray, kind: int) -> np.ndarray:
        """[L, B, H, W*bs, D] for one pool (keys or values), built in reused buffers."""
        c, (batch, width) = self.config, table.shape
        blocks = self._buffer(
            kind, "blocks", (c.n_layer, batch, width, c.n_head, self.block_size, c.head_dim)
        )
        np.take(pool, table, axis=1, out=blocks, mode="clip")  # "raise" would buffer a copy
        dense = self._buffer(
            kind, "dense", (c.n_layer, batch, c.n_head, width, self.block_size, c.head_dim)
        )
        np.copyto(dense, blocks.transpose(0, 1, 3, 2, 4, 5))
        return dense.reshape(c.n_layer, batch, c.n_head, width * self.block_size, c.head_dim)

    def append_one_each(self, seq_ids: list[int], keys: np.ndarray, values: np.ndarray) -> None:
        """Decode's write: one new token per sequence, keys/values [L, B, H, D], in one
        scattered assignment instead of one per sequence."""
        blocks, offsets = [], []
        for seq_id in seq_ids:
            position = self.lengths[seq_id]
            table = self.tables[seq_id]
            if position >= len(table) * self.block_size:
                raise OutOfBlocks(
                    f"sequence {seq_id}: {position + 1} tokens exceed its reservation"
                )
            blocks.append(table[position // self.block_size])
            offsets.append(position % self.block_size)
            self.lengths[seq_id] = position + 1
        # pool[:, blocks, :, offsets] has shape [B, L, H, D] (advanced indices first).
        self.keys[:, blocks, :, offsets] = keys.transpose(1, 0, 2, 3)
        self.values[:, blocks, :, offsets] = values.transpose(1, 0, 2, 3)

    def gather(self, seq_ids: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
        """Dense past for a batch: 2*L arrays [B, H, P, D], P the longest cached length rounded
        up to whole blocks (slots past a row's length hold garbage the mask hides), and the
        lengths [B]. Two copies per pool: the block gather and the head-major transpose."""
        lengths = np.array([self.lengths[s] for s in seq_ids], dtype=np.int64)
        longest = int(lengths.max(initial=0))
        c, batch = self.config, len(seq_ids)
        if longest == 0:
            empty = np.zeros((batch, c.n_head, 0, c.head_dim), dtype=np.float32)
            return [empty] * (2 * c.n_layer), lengths
        width = self.blocks_for(longest)
        table = np.zeros((batch, width), dtype=np.int64)
        for row, seq_id in enumerate(seq_ids):
            ids = self.tables[seq_id][:width]
            table[row, : len(ids)] = ids
        dense = [
            self._gather_pool(pool, table, kind)
            for kind, pool in enumerate((self.keys, self.values))
        ]
        past = [dense[kind][layer] for layer in range(c.n_layer) for kind in (0, 1)]
        return past, lengths
