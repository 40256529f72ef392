"""One process at a time for work that fills an on-disk cache.

Two processes that need the same artifact (two pytest workers, a test run beside
``make demo``) would otherwise both build it, into the same temporary folder. With
:func:`exclusive` around "read it, or build and write it", the first builds and the others
wait for it, then read what it wrote.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold an exclusive lock named after ``target`` (``<target>.lock`` beside it) for the
    ``with`` block. The lock is the kernel's (``flock``): it is released when the holder
    exits, however it exits, so a killed build never leaves a stale lock behind."""
    lock_file = Path(f"{target}.lock")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
