"""Baleen's episodes, OPT and labels (Polars engine for small data, Spark for the
distributed job), over the trace, the features and the simulator."""
