"""Training: LightGBM (gbm), Baleen's policy models and convergence loop, the peak
schedule, the Optuna sweep."""
