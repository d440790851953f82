"""flashml.models."""
