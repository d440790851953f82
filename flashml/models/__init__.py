"""Training shared by the systems: LightGBM (gbm) and its exact fast scoring (forest)."""
