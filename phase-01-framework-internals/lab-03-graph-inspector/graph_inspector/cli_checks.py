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


# Imported by ``import tensorflow`` only for features these commands never use, each behind a
# ``try: import ... except ImportError``: tf.lite's JAX converter (``jax``) and Keras's
# scikit-learn wrappers (``sklearn``). Together about a quarter of the import's CPU time.
UNUSED_AT_TF_IMPORT = ("jax", "sklearn")


def import_tensorflow_quietly() -> None:
    """Import TensorFlow with file descriptor 2 muted, without :data:`UNUSED_AT_TF_IMPORT`.

    TF's C++ side prints start-up lines (absl pre-init warning, oneDNN notice) straight to fd 2,
    ignoring TF_CPP_MIN_LOG_LEVEL; muting fd 2 for the import keeps errors to one line. Python
    exceptions are unaffected: if the import fails, main() still reports it in one line.

    The unused packages are hidden for the import only (a ``None`` in ``sys.modules`` makes
    their import raise ImportError, which TF and Keras take as "not installed"); afterwards they
    import as usual, though ``tf.lite``'s JAX converter and Keras's scikit-learn wrappers stay off
    in this process. A package already imported is left alone.
    """
    if "tensorflow" in sys.modules:
        return
    hidden = [name for name in UNUSED_AT_TF_IMPORT if name not in sys.modules]
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]
        import tensorflow  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorboard_command() -> str:
    """The tensorboard that is installed beside this Python (the venv's), else the bare name."""
    beside = Path(sys.executable).with_name("tensorboard")
    return str(beside) if beside.is_file() else "tensorboard"
