"""Native (C++) output kept off the console: TensorFlow's start-up lines and the TFLite
converter's diagnostics go straight to file descriptor 2, whatever ``TF_CPP_MIN_LOG_LEVEL``
says. Used by the command line (one-line errors) and by the harness (a quiet demo)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class CapturedLog:
    """The native output captured by :func:`native_stderr_captured`, readable afterwards."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> str:
        try:
            with open(self.path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


@contextmanager
def native_stderr_captured() -> Iterator[CapturedLog]:
    """Send fd 2 to a temporary file for the block: the TFLite converter's C++/MLIR side writes
    its diagnostics there directly, and the contract is a one-line error. The text is kept
    (shown with GRAPH_INSPECTOR_DEBUG=1)."""
    import tempfile

    sys.stderr.flush()
    handle, path = tempfile.mkstemp(prefix="graph_inspector_", suffix=".log")
    saved = os.dup(2)
    try:
        os.dup2(handle, 2)
        yield CapturedLog(path)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(handle)
        if not os.environ.get("GRAPH_INSPECTOR_DEBUG"):
            os.unlink(path)
