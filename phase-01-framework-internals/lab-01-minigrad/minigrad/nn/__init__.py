"""``minigrad.nn``: Module, Parameter and layers under torch.nn's names, shapes and init;
``nn.functional`` holds the op set under torch.nn.functional's names."""

from minigrad.nn import functional
from minigrad.nn.attention import MultiheadAttention
from minigrad.nn.modules import (
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    Parameter,
    ReLU,
    Sequential,
)

__all__ = [
    "GELU",
    "Dropout",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleList",
    "MultiheadAttention",
    "Parameter",
    "ReLU",
    "Sequential",
    "functional",
]
