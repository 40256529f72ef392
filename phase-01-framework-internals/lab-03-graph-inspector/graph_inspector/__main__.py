"""``python -m graph_inspector``: see :mod:`graph_inspector.cli`."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow

from graph_inspector.cli import main  # noqa: E402

raise SystemExit(main())
