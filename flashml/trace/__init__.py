"""Traces: readers of every raw format, the canonical accesses table, synthetic presets,
statistics, sampling and validation. Layer 1: imports only the base modules."""
