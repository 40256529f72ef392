"""The errors graph_inspector raises for things a user can cause.

A bad SavedModel folder is a usage error (the CLI exits 2); a conversion or validation that
fails is a failed job (exit 1). ``NotASavedModelError`` is also a ``ConversionError`` so code
that converts needs to catch only one type.
"""

from __future__ import annotations


class ConversionError(RuntimeError):
    """A SavedModel could not be converted, or the converted model failed validation."""


class NotASavedModelError(ConversionError, ValueError):
    """The path given is missing, is not a SavedModel folder, or cannot be loaded as one."""


class UnknownSignatureError(ConversionError, ValueError):
    """The signature key asked for is not in the SavedModel (a usage error: the CLI exits 2)."""
