"""Baleen's episodes, OPT and labels (Polars engine for small data, Spark for the
distributed job). Layer: above trace, features and the simulator."""
