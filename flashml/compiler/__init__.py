"""flashml.compiler."""
