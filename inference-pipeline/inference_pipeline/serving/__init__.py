"""Serving: the v2 server, dynamic batcher, backends, metrics and Ray Serve deployment."""
