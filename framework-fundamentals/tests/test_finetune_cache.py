"""The report's fine-tune cache: the first call trains and the second reads back exactly the
same figures; another setting has its own entry. A one-step-per-phase run in a temporary
cache."""

from __future__ import annotations

import dataclasses

from fundamentals.finetune import FineTuneConfig
from fundamentals_harness.finetune_cache import cached_finetune, finetune_key
from phase01_common.cache import CACHE_ENV

TINY = FineTuneConfig(
    train_per_label=1, dev_per_label=1, max_length=8, batch_size=8, phase_one_epochs=1
)


def test_second_call_reads_back_the_same_result(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    first = cached_finetune(TINY)
    second = cached_finetune(TINY)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.folder == second.folder and first.folder.is_relative_to(tmp_path)
    assert second.result == first.result  # every figure, label name and LR group
    assert len(second.result.phase_one_losses) == 1 and len(second.result.phase_two_losses) == 1
    assert "loaded from cache" in second.provenance()


def test_another_setting_has_its_own_entry():
    keys = {
        finetune_key(TINY),
        finetune_key(dataclasses.replace(TINY, seed=1)),
        finetune_key(dataclasses.replace(TINY, base_lr=1e-4)),
        finetune_key(dataclasses.replace(TINY, phase_two_epochs=2)),
    }
    assert len(keys) == 4
    assert finetune_key(TINY) == finetune_key(dataclasses.replace(TINY))  # stable
