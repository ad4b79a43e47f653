"""Benchmark scripts: each prints figures, none asserts (run them as scripts)."""
