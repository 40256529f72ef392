"""Small helpers the labs' command lines share, so bad input reads the same everywhere."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn


class OutputFolderError(ValueError):
    """An ``--out`` folder that cannot be used; the message is one line naming why."""


def prepare_out_dir(path: Path | str) -> Path:
    """Create ``path`` (and its parents) and check that files can be written in it.

    Called before any work starts, so ``--out README.md`` (a file) or ``--out /proc/nope``
    is refused at once with one line rather than a traceback after minutes of training.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"--out {folder}: is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # mkdir can succeed where writing cannot (read-only mounts, /proc): try a real file.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputFolderError(f"--out {folder}: cannot write there ({reason})") from None
    if not os.access(folder, os.W_OK):
        raise OutputFolderError(f"--out {folder}: cannot write there (permission denied)")
    return folder


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``prog: error: ...``, exit 2) without the
    usage block above it; ``--help`` still shows the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: error: message`` on one line to stderr and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)
