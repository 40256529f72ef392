"""Every built-in differentiable op: one ``Primitive`` per op, forward and backward side by side,
grouped by family. ``forward`` receives ndarrays; ``backward`` receives the upstream gradient
``g`` and reads ``ctx.saved_tensors``: ndarrays on the fast path, Tensors under
``create_graph=True``. Backwards are written with Python operators and the helpers of
:mod:`minigrad.ops.array_or_tensor`, so second order needs no second set of rules.

  array_or_tensor.py  helpers that run NumPy on an array, the primitive on a Tensor
  dtypes.py       torch's result dtype for binary ops; Cast
  elementwise.py  add, sub, mul, div, neg, pow, exp, log, tanh, sigmoid, relu, erf, abs,
                  sqrt, rsqrt, clamp, maximum, minimum, where, rounded div
  linalg.py       matmul, linear
  reductions.py   sum, mean, max, amax, var, logsumexp
  shape.py        reshape, permute, broadcast_to, sum_to, indexing
  select.py       cat, stack, gather (+ scatter-add), masked_fill, embedding
  nn_ops.py       layer_norm, gelu, dropout
  softmax.py      softmax, log_softmax, cross_entropy
  attention.py    fused scaled-dot-product attention
"""

from minigrad.ops.array_or_tensor import *  # noqa: F403
from minigrad.ops.attention import *  # noqa: F403
from minigrad.ops.dtypes import *  # noqa: F403
from minigrad.ops.elementwise import *  # noqa: F403
from minigrad.ops.linalg import *  # noqa: F403
from minigrad.ops.nn_ops import *  # noqa: F403
from minigrad.ops.reductions import *  # noqa: F403
from minigrad.ops.select import *  # noqa: F403
from minigrad.ops.shape import *  # noqa: F403
from minigrad.ops.softmax import *  # noqa: F403
