"""What the labs' command lines share, so bad input reads the same everywhere: output paths
checked before any work (one line naming what is wrong), argument types, and a parser whose
usage errors are one line."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from pathlib import Path
from typing import NoReturn


class OutputPathError(ValueError):
    """An output folder or file that cannot be used; the message is one line naming why."""


def prepare_out_dir(path: Path | str, option: str = "--out", *, create: bool = True) -> Path:
    """Check that ``path`` is (or can become) a folder where files can be written, by writing
    one; with ``create`` the folder is left in place, without it the folders made for the try
    are removed again (a check that leaves nothing behind when the work later fails).

    Called before any work starts, so ``--out README.md`` (a file) or ``--out /proc/nope`` is
    refused at once with one line (``OutputPathError``, naming ``option``) rather than a
    traceback after minutes of training.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{option} {folder}: exists and is not a folder")
    for parent in folder.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputPathError(f"{option} {folder}: {parent} is a file, not a folder")
            break
    made = [q for q in (folder, *folder.parents) if not q.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # mkdir can succeed where writing cannot (read-only mounts, /proc): try a real file.
        with tempfile.TemporaryFile(dir=folder):
            pass
        writable = os.access(folder, os.W_OK)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputPathError(f"{option} {folder}: cannot write there ({reason})") from None
    finally:
        if not create:
            for made_folder in made:  # deepest first
                with contextlib.suppress(OSError):
                    made_folder.rmdir()
    if not writable:
        raise OutputPathError(f"{option} {folder}: cannot write there (permission denied)")
    return folder


def check_out_file(path: Path | str, option: str) -> Path:
    """Check that a file can be written at ``path`` (in an existing folder, not over a folder),
    before the work; the file itself is not created or changed."""
    target = Path(path)
    if target.is_dir():
        raise OutputPathError(f"{option} {target}: is a folder, expected a file name")
    parent = target.parent
    if not parent.is_dir():
        raise OutputPathError(f"{option} {target}: folder {parent} does not exist")
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputPathError(f"{option} {target}: cannot write there (permission denied)")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputPathError(f"{option} {target}: cannot write there ({reason})") from None
    return target


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (a size, a count of steps)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive size, got {value}")
    return value


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``prog: error: ...``, exit 2) without the
    usage block above it; ``--help`` still shows the full usage. Subparsers inherit it.
    ``error_name``, where a subclass sets it, names the program in errors instead of ``prog``
    (so a subcommand's errors carry the same name as the program's)."""

    error_name: str | None = None

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.error_name or self.prog}: error: {text} (see --help)\n")
