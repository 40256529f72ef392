"""The classifier the GPU steps measure: all-MiniLM-L6-v2's architecture, built from a config.

The checkpoint package is not on the lent machine and nothing can be fetched there, so the
model is :class:`inference_pipeline.model.TopicClassifier` (the graph the pipeline exports:
``(input_ids, attention_mask) -> (logits [B, 5], embedding [B, 384])``) over a
``BertForSequenceClassification`` with MiniLM-L6's sizes, fine-tuned for a few seconds on a
synthetic five-topic task. Timings depend on the architecture alone; the fine-tuning gives the
numerical gates what a random network lacks: logits far enough apart that argmax agreement and
held-out accuracy mean something.

The task: each document is 16..128 tokens; about half of them come from its topic's own band
of 200 token ids, the rest uniformly from the whole vocabulary (a bag-of-words signal the model
must learn through attention pooling into [CLS]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from inference_pipeline.model import EMBEDDING_SIZE, NUM_HEADS, NUM_LABELS, TopicClassifier

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0  # BERT's uncased vocabulary
FIRST_WORD_ID = 1000  # ids below are special and unused tokens in that vocabulary
BAND = 200  # token ids per topic
TOPIC_SHARE = 0.5  # fraction of a document's tokens drawn from its topic's band


@dataclass(frozen=True)
class ModelSize:
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    intermediate_size: int


# all-MiniLM-L6-v2 (sentence-transformers' config): 6 layers, 384 wide, 12 heads.
MINILM_L6 = ModelSize(30522, EMBEDDING_SIZE, 6, NUM_HEADS, 4 * EMBEDDING_SIZE)
# The dry run's: the same code at a size a 2-core machine runs in a second. One layer: the
# encoder runs the same code for each, and torch.compile's tracing, the dry run's largest cost
# after the imports, inlines every layer once per timed shape.
TINY = ModelSize(FIRST_WORD_ID + NUM_LABELS * BAND + 200, 32, 1, 4, 64)


def build_classifier(size: ModelSize, seed: int = 0) -> torch.nn.Module:
    """A freshly initialised BertForSequenceClassification with ``size``'s shape, 5 labels."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        intermediate_size=size.intermediate_size,
        max_position_embeddings=512,
        num_labels=NUM_LABELS,
        pad_token_id=PAD_ID,
    )
    torch.manual_seed(seed)
    return BertForSequenceClassification(config)


@dataclass
class Documents:
    """Token ids padded to ``input_ids.shape[1]`` with PAD_ID, their mask and topic labels."""

    input_ids: torch.Tensor  # int64 [N, T]
    attention_mask: torch.Tensor  # int64 [N, T]
    labels: torch.Tensor  # int64 [N]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, rows: slice) -> Documents:
        return Documents(self.input_ids[rows], self.attention_mask[rows], self.labels[rows])


def make_documents(
    count: int, vocab_size: int, max_length: int = 128, min_length: int = 16, seed: int = 0
) -> Documents:
    """``count`` synthetic documents of min_length..max_length tokens, [CLS] ... [SEP]."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_LABELS, size=count)
    lengths = rng.integers(min_length, max_length + 1, size=count)
    ids = np.full((count, max_length), PAD_ID, dtype=np.int64)
    mask = np.zeros((count, max_length), dtype=np.int64)
    for i, (label, length) in enumerate(zip(labels, lengths, strict=True)):
        words = length - 2
        band = FIRST_WORD_ID + label * BAND + rng.integers(0, BAND, size=words)
        anywhere = rng.integers(FIRST_WORD_ID, vocab_size, size=words)
        body = np.where(rng.random(words) < TOPIC_SHARE, band, anywhere)
        ids[i, :length] = [CLS_ID, *body, SEP_ID]
        mask[i, :length] = 1
    return Documents(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels))


def fine_tune(
    model: torch.nn.Module,
    data: Documents,
    max_steps: int,
    batch_size: int,
    device,
    seconds: float,
    lr: float,
    seed: int = 0,
) -> list[float]:
    """AdamW on the synthetic task in FP32, a linear warm-up over the first tenth of
    ``max_steps``, for ``max_steps`` steps or ``seconds``, whichever ends first; returns the
    losses. The model ends in eval mode with gradients off."""
    import time

    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, max_steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    end = time.monotonic() + seconds
    while len(losses) < max_steps and time.monotonic() < end:
        pick = torch.randint(0, len(data), (batch_size,), generator=generator)
        out = model(
            input_ids=data.input_ids[pick].to(device),
            attention_mask=data.attention_mask[pick].to(device),
            labels=data.labels[pick].to(device),
        )
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(out.loss.detach()))
    model.eval().requires_grad_(False)
    return losses


def variant(
    sequence_classifier: torch.nn.Module, dtype: torch.dtype, attention: str
) -> TopicClassifier:
    """A copy of the fine-tuned model in ``dtype`` with ``attention`` ("sdpa" or "eager"),
    wrapped as the pipeline's exported graph."""
    import copy

    model = copy.deepcopy(sequence_classifier).to(dtype)
    model.set_attn_implementation(attention)
    return TopicClassifier(model).eval()
