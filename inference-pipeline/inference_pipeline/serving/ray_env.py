"""Environment for a private local Ray, set BEFORE ``ray`` is imported (Ray reads it then).

Ray 2.60 turns token authentication on for a new local cluster and, unless told otherwise,
writes the token to ``~/.ray/auth_token``. Here the token lives only in the environment of
the processes Ray starts (``RAY_AUTH_TOKEN``), so nothing is written under the home folder.
"""

from __future__ import annotations

import os
import secrets


def private_ray_environment() -> dict[str, str]:
    """Token auth with an in-memory token, no usage telemetry, undeduplicated logs."""
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
    }


def use_private_ray_environment() -> None:
    """Set the variables in this process (kept where the caller already set them)."""
    for key, value in private_ray_environment().items():
        os.environ.setdefault(key, value)
