"""MAT: learned eviction at the tail of LRU (object mode and the flash cache). `job`:
`flashml mat run` (the stages), its `settings` and its `report` (summary, text); `model`:
the time-to-access model and its labels; `simulation`: MAT's part of the simulator's Python
face (object-mode MAT and LRB, flash mode with MAT as the eviction, the eviction features);
`object_baselines`: libCacheSim's object policies as the rivals. The eviction contract
(features/eviction.toml) is the policy ABI's, in the kernel."""
