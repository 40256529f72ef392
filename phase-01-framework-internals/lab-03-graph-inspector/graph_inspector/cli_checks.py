"""What every command of :mod:`graph_inspector.cli` checks or needs before its work starts: the
one-line error it raises (:class:`CliError`, with the exit status), the SavedModel folder
check, a quiet TensorFlow import, and where the installed ``tensorboard`` is.

The output-path checks themselves are the labs' shared ones (:mod:`phase01_common.cli`); their
``OutputPathError`` is reported by :func:`graph_inspector.cli.main` like a ``CliError``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from graph_inspector.errors import NotASavedModelError

EXIT_USAGE = 2  # bad path / not a SavedModel / bad arguments
EXIT_FAILED = 1  # the job ran and failed (unconvertible graph, failing checks)


class CliError(Exception):
    """An error to report in one line; ``exit_code`` says which kind."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def checked_savedmodel(path: str) -> Path:
    """Check the folder (no TensorFlow needed), then import TensorFlow quietly."""
    from graph_inspector.savedmodel import check_savedmodel_dir

    try:
        folder = check_savedmodel_dir(path)
    except NotASavedModelError as exc:
        raise CliError(str(exc)) from exc
    import_tensorflow_quietly()
    return folder


def import_tensorflow_quietly() -> None:
    """Import TensorFlow with file descriptor 2 muted.

    TF's C++ side prints start-up lines (absl pre-init warning, oneDNN notice) straight to fd 2,
    ignoring TF_CPP_MIN_LOG_LEVEL; muting fd 2 for the import keeps errors to one line. Python
    exceptions are unaffected: if the import fails, main() still reports it in one line.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorboard_command() -> str:
    """The tensorboard that is installed beside this Python (the venv's), else the bare name."""
    beside = Path(sys.executable).with_name("tensorboard")
    return str(beside) if beside.is_file() else "tensorboard"
