"""The dense past a step graph reads, kept per batch row and appended to in place.

The step graph reads its past ``[rows, H, width, D]`` as it is and returns only the new
tokens' keys/values (``model.py``), so the engines keep the batch's past here and write each
new token's keys/values into its row's next slot: a decode pass costs one slot per row, not a
copy of the whole cache.

All ``2 * n_layer`` pasts live in one array ``[2L, rows, H, width, D]`` (index ``2 * layer +
kind``, the graph's input order), so each is contiguous and so is any leading block of rows:
``past(top)`` hands the graph the first ``top`` rows without a copy. ``width`` is the capacity,
a multiple of ``grow`` slots; slots at or past a row's length hold stale values that ``mask``
hides. Growing (when a row needs more slots) and shrinking (when the long rows have left)
copy the rows once into the other of two buffers allocated (and touched) up front for the
widest capacity, so a resize is one copy of the live slots, never an allocation (a fresh
multi-MB array costs more in page faults than the copy); with ``grow`` slots of headroom it
happens at most once per ``grow`` tokens of the longest row. A past with ``grow >= max_width``
has its full width from the start: one buffer, never resized (the continuous engine's, whose
rows come and go: there a resize would be a copy of every live row inside the streams' gap).
"""

from __future__ import annotations

import numpy as np

from inference_pipeline.generation.model import GPTConfig


class DensePast:
    def __init__(
        self, config: GPTConfig, rows: int, grow: int = 32, max_width: int | None = None
    ) -> None:
        max_width = max_width or config.max_positions
        if rows < 1 or grow < 1 or not 1 <= max_width <= config.max_positions:
            raise ValueError(
                f"need rows >= 1, grow >= 1 and 1 <= max_width <= {config.max_positions}, "
                f"got {rows}, {grow}, {max_width}"
            )
        self.config = config
        self.rows = rows
        self.grow = grow
        self.max_width = max_width  # the most slots a row can hold
        self.lengths = np.zeros(rows, dtype=np.int64)  # valid slots per row
        self._shape = (2 * config.n_layer, rows, config.n_head, config.head_dim)
        size = int(np.prod(self._shape)) * max_width
        full = grow >= max_width  # full width from the start: nothing to resize into
        self._buffers = [np.empty(size, np.float32) for _ in range(1 if full else 2)]
        for buffer in self._buffers:
            buffer.fill(0.0)  # touch every page now, not inside a pass
        self._current = 0
        self.kv = self._layout(0, max_width if full else 0)
        # [rows, width + 1]: the past slots (1 = valid), then the one new token of a decode pass
        self.mask = np.zeros((rows, self.width + 1), dtype=np.int64)
        self.mask[:, self.width] = 1
        self.resizes = 0

    @property
    def width(self) -> int:
        return self.kv.shape[3]

    def past(self, top: int) -> list[np.ndarray]:
        """The first ``top`` rows' pasts, ``2L`` arrays ``[top, H, width, D]`` (views)."""
        return list(self.kv[:, :top])

    def decode_mask(self, top: int) -> np.ndarray:
        """``[top, width + 1]`` mask for a one-token pass over ``past(top)`` (a view)."""
        return self.mask[:top]

    def _capacity(self, tokens: int) -> int:
        return min(-(-tokens // self.grow) * self.grow, max(self.max_width, tokens))

    def reserve(self, tokens: int) -> None:
        """Make room for ``tokens`` slots in every row (a pass writes a new token's slot too)."""
        if tokens > self.width:
            self._resize(self._capacity(tokens))

    def fit(self) -> None:
        """Shrink once the longest row needs at most half the capacity (a wide pass over short
        rows costs reading slots nobody uses; a shrink that is soon undone costs two copies)."""
        needed = self._capacity(int(self.lengths.max()) + 1)
        if 2 * needed <= self.width:
            self._resize(needed)

    def _layout(self, buffer: int, width: int) -> np.ndarray:
        kinds, rows, heads, dim = self._shape
        flat = self._buffers[buffer][: kinds * rows * heads * width * dim]
        return flat.reshape(kinds, rows, heads, width, dim)

    def _resize(self, width: int) -> None:
        if width * int(np.prod(self._shape)) > self._buffers[0].size:
            raise ValueError(f"{width} slots exceed this past's {self.max_width}")
        keep = min(width, self.width)
        live = int(np.flatnonzero(self.lengths).max(initial=-1)) + 1  # rows past it are empty
        self._current = 1 - self._current
        kv = self._layout(self._current, width)
        kv[:, :live, :, :keep] = self.kv[:, :live, :, :keep]
        mask = np.zeros((self.rows, width + 1), dtype=np.int64)
        mask[:, :keep] = self.mask[:, :keep]
        mask[:, width] = 1
        self.kv, self.mask = kv, mask
        self.resizes += 1

    def clear(self, row: int) -> None:
        self.lengths[row] = 0
        self.mask[row, : self.width] = 0

    def move(self, source: int, target: int) -> None:
        """Row ``source``'s slots become row ``target``'s (an empty row); ``source`` empties."""
        n = int(self.lengths[source])
        self.kv[:, target, :, :n] = self.kv[:, source, :, :n]
        self.lengths[target] = n
        self.mask[target] = self.mask[source]
        self.clear(source)

    def write(self, row: int, keys: np.ndarray, values: np.ndarray, start: int = 0) -> None:
        """Write one row's keys/values ``[L, H, T, D]`` at slots ``start .. start + T``
        (``reserve`` first); the row's length becomes ``start + T``."""
        end = start + keys.shape[2]
        self.kv[0::2, row, :, start:end] = keys
        self.kv[1::2, row, :, start:end] = values
        self.lengths[row] = end
        self.mask[row, :end] = 1
        self.mask[row, end : self.width] = 0

    def append_one_each(self, rows: np.ndarray, new: list[np.ndarray]) -> None:
        """One new token for each row in ``rows``: ``new`` is a one-token pass's ``2L``
        key/value outputs, ``[top, H, 1, D]`` each (rows ``0 .. top``, in the past's order),
        and row ``r`` of them goes to row ``r``'s next slot, in one scattered assignment."""
        slots = self.lengths[rows]
        side_by_side = np.concatenate(new, axis=2)[rows]  # [len(rows), H, 2L, D]
        # kv[:, rows, :, slots] has shape [len(rows), 2L, H, D] (advanced indices first)
        self.kv[:, rows, :, slots] = side_by_side.transpose(0, 2, 1, 3)
        self.mask[rows, slots] = 1
        self.lengths[rows] = slots + 1
