"""exclusive(): a second process waits for the first, and a failed holder lets go."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from phase01_common.locks import exclusive

# A child says it is about to take the lock, takes it, writes "start", waits for the go
# file, writes "end".
CHILD = """
import sys, time
from pathlib import Path
from phase01_common.locks import exclusive
target, log, go, ready = map(Path, sys.argv[1:5])
ready.touch()
with exclusive(target):
    with log.open("a") as f:
        f.write("start\\n")
    while not go.exists():
        time.sleep(0.01)
    with log.open("a") as f:
        f.write("end\\n")
"""


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    """A hang guard, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


def lock_is_held(target: Path) -> bool:
    fd = os.open(f"{target}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_two_processes_take_turns(tmp_path: Path) -> None:
    target, log, go = tmp_path / "artifact", tmp_path / "log", tmp_path / "go"
    children = []
    with exclusive(target):  # both children queue behind this process
        for i in range(2):
            args = [
                sys.executable,
                "-c",
                CHILD,
                str(target),
                str(log),
                str(go),
                str(tmp_path / f"r{i}"),
            ]
            children.append(subprocess.Popen(args))
        wait_for(lambda: all((tmp_path / f"r{i}").exists() for i in range(2)), "both children")
        assert not log.exists()  # neither got past the lock this process holds
    wait_for(lambda: log.exists() and "start" in log.read_text(), "the first child's start")
    assert lock_is_held(target)  # the first child holds it while it works
    assert log.read_text().split() == ["start"]  # and the second is still waiting
    go.touch()
    for child in children:
        assert child.wait(timeout=60) == 0
    assert log.read_text().split() == ["start", "end", "start", "end"]
    assert not lock_is_held(target)


def test_the_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    target = tmp_path / "artifact"
    with pytest.raises(RuntimeError), exclusive(target):
        assert lock_is_held(target)
        raise RuntimeError("build failed")
    assert not lock_is_held(target)
