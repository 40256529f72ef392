"""The project's cache root and its two helpers: keys that change with what they hash, and
"fill once" that leaves either a complete folder or nothing."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from phase01_common.cache import CACHE_ENV, artifact_key, cache_root, fill_once


@dataclass
class Settings:
    steps: int = 3
    rate: float = 0.1


def test_cache_root_follows_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv(CACHE_ENV)
    assert cache_root() == Path.home() / ".cache" / "inference_pipeline"


def test_key_changes_with_settings_source_version_and_data(tmp_path):
    source = tmp_path / "train.py"
    source.write_text("steps = 3\n")
    base = artifact_key(Settings(), [source], ["1.0"], [b"abc"])
    assert base == artifact_key({"steps": 3, "rate": 0.1}, [source], ["1.0"], [b"abc"])
    variants = {
        artifact_key(Settings(steps=4), [source], ["1.0"], [b"abc"]),
        artifact_key(Settings(), [source], ["1.1"], [b"abc"]),
        artifact_key(Settings(), [source], ["1.0"], [b"abd"]),
    }
    source.write_text("steps = 4\n")
    variants.add(artifact_key(Settings(), [source], ["1.0"], [b"abc"]))
    assert len(variants) == 4 and base not in variants
    with pytest.raises(TypeError, match="dataclass or a mapping"):
        artifact_key(3, [])


def test_fill_once_fills_then_hits(tmp_path):
    calls = []

    def fill(partial: Path) -> None:
        calls.append(partial)
        assert partial != tmp_path / "a"  # written beside, renamed into place
        (partial / "done").write_text("x")

    assert fill_once(tmp_path / "a", "done", fill) is False
    assert fill_once(tmp_path / "a", "done", fill) is True
    assert len(calls) == 1 and (tmp_path / "a" / "done").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a.lock"]


def test_a_failed_fill_leaves_nothing_and_the_next_call_fills(tmp_path):
    def broken(partial: Path) -> None:
        (partial / "half").write_text("x")
        raise RuntimeError("killed mid-way")

    (tmp_path / "a.partial-999999").mkdir()  # what a killed process would leave
    with pytest.raises(RuntimeError, match="killed"):
        fill_once(tmp_path / "a", "done", broken)
    with pytest.raises(RuntimeError, match="did not write done"):
        fill_once(tmp_path / "a", "done", lambda partial: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.lock"]
    assert fill_once(tmp_path / "a", "done", lambda p: (p / "done").write_text("y")) is False


def test_two_threads_at_once_fill_once(tmp_path):
    calls, hits = [], []
    start = threading.Barrier(2)

    def fill(partial: Path) -> None:
        calls.append(1)
        (partial / "done").write_text("x")

    def ask() -> None:
        start.wait()
        hits.append(fill_once(tmp_path / "a", "done", fill))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and sorted(hits) == [False, True]
