"""Real artifacts shared by the whole pytest run (and by later runs: both live in the on-disk
cache, keyed by settings and code, so a second session reads them back).

- ``quick_build``: ``pipeline.build_cached(QUICK_BUILD)`` (``scenarios.quick_build``, one per
  process): a real fine-tune at quick settings, both exports, fusion, INT8 dynamic, static
  and NNCF quantization, FP16, every gate, the written repository. The offline tests'
  ``scenarios.quick_artifacts`` takes its exports from it, and ``tools/run_demo.py --quick``
  (the report test) reads the same cached build.
- ``quick_gpt``: the byte-level GPT trained for ``QUICK_GPT_STEPS`` steps and exported (FP32
  and its real INT8 graph).
"""

from __future__ import annotations

import pytest

# The GPT tests' step budget (about 45 s of one core): its cache-equality and INT8 gates pass.
QUICK_GPT_STEPS = 300


@pytest.fixture(scope="session")
def quick_build():
    from inference_pipeline_harness.scenarios import quick_build

    return quick_build()


@pytest.fixture(scope="session")
def quick_trained():
    """The quick build's fine-tuned classifier (from the cache the build filled)."""
    from inference_pipeline.model import load_or_train
    from inference_pipeline.pipeline import QUICK_BUILD

    return load_or_train(QUICK_BUILD.train, progress=lambda _: None)


@pytest.fixture(scope="session")
def quick_gpt():
    import torch
    from inference_pipeline.generation.artifacts import load_artifacts
    from inference_pipeline.generation.train import TrainSettings

    threads = torch.get_num_threads()
    try:
        return load_artifacts(
            settings=TrainSettings(steps=QUICK_GPT_STEPS), progress=lambda _: None
        )
    finally:
        torch.set_num_threads(threads)  # training pins one thread
