"""KML: a tiny learned readahead tuner. `testbed`: the real experiment (db_bench on a
loop device, readahead swept, page cache dropped)."""
