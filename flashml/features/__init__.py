"""flashml.features."""
