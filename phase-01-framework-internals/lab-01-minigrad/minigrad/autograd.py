"""``minigrad.autograd``: the functional entry points, named as in ``torch.autograd``."""

from minigrad.engine import backward, grad
from minigrad.function import Function, enable_grad, no_grad
from minigrad.gradcheck import gradcheck, gradgradcheck

__all__ = ["Function", "backward", "enable_grad", "grad", "gradcheck", "gradgradcheck", "no_grad"]
