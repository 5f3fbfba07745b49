"""Benchmarks behind ``afm-struct bench``: masks, decode and more; results are JSON files."""
