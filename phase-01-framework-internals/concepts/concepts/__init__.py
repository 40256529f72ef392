"""The spec's PyTorch concepts as running code."""
