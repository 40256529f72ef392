"""Train the byte-level GPT on BBC News article text, and cache the checkpoint outside the repo.

Training runs for a number of optimizer steps, so one commit trains the same model on any
machine (same seed, same batches, same weights); a wall-clock budget (``seconds``) stays
available, but what it trains depends on the machine's speed. Either way the learning rate
follows a cosine schedule over the budget, so a short budget still ends with a decayed rate.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from phase01_common.cache import cache_root
from phase01_common.locks import exclusive

from inference_pipeline.generation.model import GPT, GPTConfig

ARTICLE_SEPARATOR = b"\n\n\n"


DEFAULT_STEPS = 1200  # about 3.5 minutes on one quiet core of the 2-core machine


@dataclass(frozen=True)
class TrainSettings:
    """``steps`` (deterministic) or ``seconds`` (a wall-clock budget): give at most one;
    with neither, ``DEFAULT_STEPS`` steps."""

    steps: int | None = None
    seconds: float | None = None
    batch_size: int = 8
    window: int = 256  # bytes per training window (the model's context)
    peak_lr: float = 3e-3
    warmup_steps: int = 30
    seed: int = 0
    threads: int = 1  # on a shared, oversubscribed CPU one thread beats two (no spin-waits)
    # bfloat16 autocast for the forward pass (fp32 weights and optimizer): about 2x faster
    # on a CPU with AVX512-BF16; the exported graphs are fp32 either way.
    bf16_autocast: bool = True

    def __post_init__(self) -> None:
        if self.steps is not None and self.seconds is not None:
            raise ValueError("give the training budget as steps or as seconds, not both")
        if self.steps is None and self.seconds is None:
            object.__setattr__(self, "steps", DEFAULT_STEPS)  # frozen: set once, here
        if self.steps is not None and not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"training steps must be a positive integer, got {self.steps}")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"training seconds must be a positive number, got {self.seconds}")
        if self.batch_size < 1 or self.window < 2:
            raise ValueError("batch_size must be >= 1 and window >= 2")

    def describe(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{self.seconds:.0f} s"


def cache_dir() -> Path:
    """Checkpoints live outside the repository, in the project's cache root
    (``phase01_common.cache``; ``INFERENCE_PIPELINE_CACHE`` moves it)."""
    return cache_root()


def checkpoint_path(config: GPTConfig, settings: TrainSettings) -> Path:
    """One file per (model config, training settings): a change to either retrains."""
    key = json.dumps({"config": config.to_dict(), "train": settings.__dict__}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / f"gpt-{digest}.pt"


def corpus_bytes() -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) BBC News text as uint8 arrays, articles separated by blank lines."""
    from phase01_common.bbc_news import load_bbc_news

    split = load_bbc_news()
    train = ARTICLE_SEPARATOR.join(t.encode("utf-8") for t in split.train_texts)
    dev = ARTICLE_SEPARATOR.join(t.encode("utf-8") for t in split.dev_texts)
    return np.frombuffer(train, dtype=np.uint8), np.frombuffer(dev, dtype=np.uint8)


def sample_windows(data: np.ndarray, batch: int, window: int, rng: np.random.Generator):
    starts = rng.integers(0, len(data) - window - 1, size=batch)
    rows = np.stack([data[s : s + window + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(rows)


@torch.no_grad()
def held_out_loss(model: GPT, data: np.ndarray, window: int, windows: int = 16) -> float:
    """Mean next-byte cross-entropy (nats) over evenly spaced held-out windows."""
    model.eval()
    starts = np.linspace(0, len(data) - window - 2, windows).astype(np.int64)
    rows = torch.from_numpy(np.stack([data[s : s + window + 1] for s in starts]).astype(np.int64))
    loss = float(model.loss(rows))
    model.train()
    return loss


def train(
    config: GPTConfig,
    settings: TrainSettings,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    progress: Callable[[str], None] = print,
) -> tuple[GPT, dict[str, float]]:
    """Train from scratch for ``settings.steps`` (or ``settings.seconds``); returns the model
    (eval mode) and a summary."""
    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)
    rng = np.random.default_rng(settings.seed)
    train_data, dev_data = data if data is not None else corpus_bytes()
    window = min(settings.window, config.max_positions)
    model = GPT(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.peak_lr, weight_decay=0.1)
    start = time.perf_counter()
    step, last_report, loss = 0, start, float("nan")

    def done_fraction(elapsed: float) -> float:  # how much of the budget is spent
        if settings.steps is not None:
            return step / settings.steps
        return elapsed / settings.seconds

    while (fraction := done_fraction(time.perf_counter() - start)) < 1.0:
        elapsed = time.perf_counter() - start
        decay = 0.5 * (1 + math.cos(math.pi * min(1.0, fraction)))
        warmup = min(1.0, (step + 1) / settings.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = settings.peak_lr * warmup * (0.1 + 0.9 * decay)
        batch = sample_windows(train_data, settings.batch_size, window, rng)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings.bf16_autocast):
            loss_t = model.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss, step = loss_t.item(), step + 1
        if time.perf_counter() - last_report > 15 or step == 1:
            last_report = time.perf_counter()
            progress(
                f"  step {step:5d}  {100 * done_fraction(elapsed):3.0f}% of "
                f"{settings.describe()}  {elapsed:6.0f} s  train loss {loss:.3f} nats/byte"
            )
    dev_loss = held_out_loss(model, dev_data, window)
    summary = {
        "steps": step,
        "seconds": round(time.perf_counter() - start, 1),
        "bytes_seen": step * settings.batch_size * window,
        "train_loss": loss,
        "held_out_loss": dev_loss,
        "held_out_bits_per_byte": dev_loss / math.log(2),
    }
    progress(f"  done: {step} steps, held-out {summary['held_out_bits_per_byte']:.3f} bits/byte")
    return model.eval(), summary


def save_checkpoint(path: Path, model: GPT, summary: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    payload = {
        "config": model.config.to_dict(),
        "state_dict": model.state_dict(),
        "summary": summary,
    }
    torch.save(payload, tmp)
    tmp.replace(path)  # atomic: a killed run never leaves half a checkpoint


def load_checkpoint(path: Path) -> tuple[GPT, dict[str, float]]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**payload["config"]))
    model.load_state_dict(payload["state_dict"])
    return model.eval(), dict(payload["summary"])


def trained_model(
    config: GPTConfig | None = None,
    settings: TrainSettings | None = None,
    retrain: bool = False,
    progress: Callable[[str], None] = print,
) -> tuple[GPT, dict[str, float], Path]:
    """The cached checkpoint for these settings, training it first when missing."""
    config = config or GPTConfig()
    settings = settings or TrainSettings()
    path = checkpoint_path(config, settings)
    with exclusive(path):  # a second process needing it waits, then loads it
        if path.is_file() and not retrain:
            model, summary = load_checkpoint(path)
            return model, summary, path
        progress(f"training {config} for {settings.describe()} -> {path}")
        model, summary = train(config, settings, progress=progress)
        save_checkpoint(path, model, summary)
    return model, summary, path
