"""Serving: the v2 inference server, its dynamic batcher, backends, metrics and Ray Serve deployment."""
