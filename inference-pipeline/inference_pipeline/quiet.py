"""One way to silence the exporters, optimizers and quantizers while the build prints its own
progress: their stdout, their warnings, and one logger raised to ERROR for the duration."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet(logger_name: str | None) -> Iterator[None]:
    """Silence stdout and warnings, and ``logger_name`` (None: the root logger) below ERROR."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
