"""KML: a tiny learned readahead tuner. `job`: `flashml kml run` (the stages), its
`settings` and its `report` (summary, text); `model`: the networks and the tree, trained on
the page cache's windows; `testbed`: the real experiment (db_bench on a loop device,
readahead swept, page cache dropped); `collect`: the page cache's tracer; `twin`: the
offline twin over the simulator; `experiment`: the runners, real and twin; `stats`:
intervals and verdicts. The readahead contract (features/readahead.toml) and the bundle's
readahead.json (compiler/readahead.py) are the policy ABI's, in the kernel."""
