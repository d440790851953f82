"""Pannier: container-based flash caching of blocks. `job`: `flashml pannier run` (the
stages), its `settings` and its `report` (summary, text); `blockcache`: the simulator's block
mode from Python (per-block and container caches, TIRE); `blockgen`: the block presets,
generated and written as MSR CSV. The block requests of a canonical table are the kernel's
(flashml/trace/blocks.py)."""
