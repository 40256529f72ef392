"""Autoregressive generation: a byte-level GPT with an explicit KV cache, its ONNX export and
gates, a paged KV cache, continuous and static batching engines, and a streaming route."""
