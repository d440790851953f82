"""ARCHITECTURE.md's worked example, part 2: a toy system's job, in the shape every system
follows, living in the tests only. It judges object-cache eviction policies on an object
trace: `ingest` (the trace as a (key, size) table) -> `simulate` (each policy at one
capacity) -> `summary`. Registered by appending "toy_system" to flashml.systems.SYSTEMS, it is
`flashml toy run`."""
