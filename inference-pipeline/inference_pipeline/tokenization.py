"""Tokenization outside the graph: one HF ``tokenizers`` file, identical at export, gate and serve.

The ONNX graph takes ``input_ids`` and ``attention_mask`` (INT64, [batch, sequence]); this
module turns texts into those arrays. The same configured ``tokenizer.json`` (truncation at
``MAX_SEQUENCE_LENGTH``, padding to the batch's longest text, on the right, with ``[PAD]``)
is written into every model folder of the repository, so the serving side tokenizes with
exactly the settings the gates were measured with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

# Longest input the repository's models are gated on (config.pbtxt's max_sequence_length).
MAX_SEQUENCE_LENGTH = 256
PAD_TOKEN = "[PAD]"


class TextTokenizer:
    """Texts -> padded ``input_ids`` / ``attention_mask`` arrays (NumPy INT64)."""

    def __init__(self, tokenizer: Tokenizer, max_length: int = MAX_SEQUENCE_LENGTH) -> None:
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        pad_id = tokenizer.token_to_id(PAD_TOKEN)
        if pad_id is None:
            raise ValueError(f"the tokenizer has no {PAD_TOKEN} token")
        self.max_length = max_length
        self.tokenizer = tokenizer
        # Padding to the batch's longest text (not a fixed length): the graph has a dynamic
        # sequence axis, and fixed padding would make every short text pay for 256 tokens.
        tokenizer.enable_truncation(max_length=max_length)
        tokenizer.enable_padding(direction="right", pad_id=pad_id, pad_token=PAD_TOKEN)

    @classmethod
    def from_file(cls, path: Path, max_length: int = MAX_SEQUENCE_LENGTH) -> TextTokenizer:
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise ValueError(f"{path}: not a tokenizers file ({exc})") from exc
        return cls(tokenizer, max_length)

    @classmethod
    def from_checkpoint(cls, max_length: int = MAX_SEQUENCE_LENGTH) -> TextTokenizer:
        """The MiniLM checkpoint's own tokenizer (uncased WordPiece)."""
        from phase01_common.checkpoints import minilm_checkpoint_dir

        return cls.from_file(minilm_checkpoint_dir() / "tokenizer.json", max_length)

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """A padded batch: ``input_ids`` and ``attention_mask``, both INT64 [len(texts), T]."""
        if isinstance(texts, str) or not texts:
            raise ValueError("encode takes a non-empty list of texts")
        encodings = self.tokenizer.encode_batch(list(texts))
        return {
            "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
        }

    def token_count(self, text: str) -> int:
        """Tokens of ``text`` alone, special tokens included, after truncation."""
        return int(sum(self.tokenizer.encode(text).attention_mask))

    def truncate_to_tokens(self, text: str, tokens: int) -> str:
        """The longest word prefix of ``text`` that encodes to at most ``tokens`` tokens."""
        words = text.split()
        low, high = 1, len(words)
        while low < high:  # binary search on the word count
            middle = (low + high + 1) // 2
            if self.token_count(" ".join(words[:middle])) <= tokens:
                low = middle
            else:
                high = middle - 1
        return " ".join(words[:low])

    def save(self, path: Path) -> None:
        """Write the configured tokenizer (truncation and padding included) as JSON."""
        self.tokenizer.save(str(path))
