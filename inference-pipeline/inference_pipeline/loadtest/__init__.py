"""A perf_analyzer-style load generator for v2 inference servers (loopback only)."""
