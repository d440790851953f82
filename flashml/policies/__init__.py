"""Policies judged on the simulator at a target write rate: the tuning helper, the
heuristic baselines (RejectX, CoinFlip), OPT, and Baleen-TCO."""
