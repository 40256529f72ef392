"""Shared by the report's tests: one quick demo run per session, and run_demo as a module."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image as PILImage

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def quick_report(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess]:
    """``tools/run_demo.py --quick`` once for the whole session (the report tests and the
    browser test read the same pages)."""
    out = tmp_path_factory.mktemp("report")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_demo.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return out, proc


def _load_run_demo() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "tools" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_demo_module() -> types.ModuleType:
    """A fresh copy of tools/run_demo.py (a script, not a package), loaded by path."""
    return _load_run_demo()


def _assert_valid_image(path: Path) -> None:
    assert path.is_file(), f"report references a missing image: {path}"
    if path.suffix == ".svg":
        root = ET.parse(path).getroot()
        assert root.tag.endswith("svg"), f"{path} is not an SVG document"
    else:
        with PILImage.open(path) as img:
            img.verify()
            assert img.size[0] > 10 and img.size[1] > 10, f"{path} is a degenerate image"


@pytest.fixture(scope="session")
def assert_valid_image() -> Callable[[Path], None]:
    """Asserts a file is a readable PNG/JPEG of some size, or an SVG document."""
    return _assert_valid_image
