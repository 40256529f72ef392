"""The project's one on-disk cache of trained artifacts, outside the repository.

Every lab that trains something the demo and the tests reuse (the inference pipeline's
fine-tune and builds, lab 03's BERT-tiny, the fundamentals fine-tune) keeps it under
:func:`cache_root` (``~/.cache/inference_pipeline``; the ``INFERENCE_PIPELINE_CACHE``
variable moves the whole cache). A folder's name is a hash of everything that determines its
contents (:func:`artifact_key`), so a changed setting, source file or library version misses
and trains again, and the same commit on any machine reads back what it trained.

:func:`fill_once` is "read it, or build it and write it" for one such folder: under
:func:`phase01_common.locks.exclusive` (a second process waits for the first, then reads),
written into a temporary sibling and renamed into place, so a reader never sees a half-written
folder and a killed build leaves nothing that looks complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from phase01_common.locks import exclusive

CACHE_ENV = "INFERENCE_PIPELINE_CACHE"


def cache_root() -> Path:
    """Where every cached artifact lives: ``$INFERENCE_PIPELINE_CACHE``, else
    ``~/.cache/inference_pipeline``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "inference_pipeline")


def artifact_key(
    settings: object,
    sources: Iterable[Path],
    versions: Iterable[str] = (),
    data: Iterable[bytes] = (),
) -> str:
    """A 16-hex-digit hash of what determines a trained artifact: ``settings`` (a dataclass or
    a JSON-able mapping), the bytes of each source file, library versions and raw data."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        settings = dataclasses.asdict(settings)
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a dataclass or a mapping, got {type(settings)}")
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for path in sources:
        digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes())
    for version in versions:
        digest.update(b"\0" + version.encode())
    for blob in data:
        digest.update(b"\0" + hashlib.sha256(blob).digest())
    return digest.hexdigest()[:16]


def fill_once(folder: Path, marker: str, fill: Callable[[Path], None]) -> bool:
    """Make sure ``folder`` holds a complete artifact; True if it already did (a cache hit).

    ``marker`` names the file whose presence means "complete" (``fill`` must write it last or
    at all). On a miss, ``fill(tmp)`` writes into a fresh temporary sibling, which is then
    renamed to ``folder``. The check and the fill run under :func:`exclusive`, so two
    processes asking at once fill it once.
    """
    folder = Path(folder)
    with exclusive(folder):
        if (folder / marker).is_file():
            return True
        # Under the lock, any partial sibling is a killed filler's leftovers.
        for stale in folder.parent.glob(f"{folder.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
        partial.mkdir(parents=True)
        try:
            fill(partial)
            if not (partial / marker).is_file():
                raise RuntimeError(f"filling {folder} did not write {marker}")
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete one left by a crash
            partial.rename(folder)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return False


def provenance(from_cache: bool, folder: Path) -> str:
    """One line for a report: where a cached artifact came from in this run."""
    if from_cache:
        return f"loaded from cache {folder}, trained by this commit's code"
    return f"trained in this run, cached in {folder}"
