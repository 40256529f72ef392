"""The report's fine-tune, run once per setting and code and cached.

``run_finetune(config)`` (:mod:`fundamentals.finetune`) is deterministic given its settings
(seeded, a fixed number of steps), so the demo and the report's test reuse one run: its
:class:`~fundamentals.finetune.FineTuneResult` (accuracies, losses, learning-rate groups, the
freeze/unfreeze findings, the seconds it took) is kept as JSON under
``<cache root>/fundamentals/finetune-<key>/`` (:func:`phase01_common.cache.cache_root`;
``INFERENCE_PIPELINE_CACHE`` moves it). The key hashes the :class:`FineTuneConfig`, the source
of ``fundamentals/finetune.py`` and of the BBC News split, and the torch and transformers
versions. The library's own tests call ``run_finetune`` directly and always train.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from fundamentals import finetune
from fundamentals.finetune import FineTuneConfig, FineTuneResult
from phase01_common.cache import artifact_key, cache_root, fill_once, provenance

RESULT = "result.json"


@dataclass
class CachedFineTune:
    result: FineTuneResult
    from_cache: bool
    folder: Path

    def provenance(self) -> str:
        """One line for the report: where the figures came from."""
        return provenance(self.from_cache, self.folder)


def finetune_key(config: FineTuneConfig) -> str:
    import phase01_common.bbc_news
    import torch
    import transformers

    return artifact_key(
        config,
        [Path(finetune.__file__), Path(phase01_common.bbc_news.__file__)],
        versions=(torch.__version__, transformers.__version__),
    )


def result_to_json(result: FineTuneResult) -> str:
    return json.dumps(dataclasses.asdict(result), indent=1)


def result_from_json(text: str) -> FineTuneResult:
    fields = json.loads(text)
    fields["label_names"] = tuple(fields["label_names"])
    return FineTuneResult(**fields)


def cached_finetune(config: FineTuneConfig, cache_dir: Path | None = None) -> CachedFineTune:
    """``run_finetune(config)``'s result: from the cache, or run now and cached (two processes
    asking at once run it once)."""
    folder = (cache_dir or cache_root()) / "fundamentals" / f"finetune-{finetune_key(config)}"
    ran: list[FineTuneResult] = []

    def run_into(partial: Path) -> None:
        ran.append(finetune.run_finetune(config))
        (partial / RESULT).write_text(result_to_json(ran[0]))

    hit = fill_once(folder, RESULT, run_into)
    if not hit:
        return CachedFineTune(ran[0], False, folder)
    return CachedFineTune(result_from_json((folder / RESULT).read_text()), True, folder)
