"""MLCache: a page cache shared by several streams, partitioned by a small network every
interval. `job`: `flashml mlcache run` (the stages), its `settings` and its `report`
(summary, text); `model`: the network and its labels (the best split of an interval);
`partitioning`: stack distances, hit curves and the partitioned page cache across streams;
`flash_partition`: the same in flash mode (Baleen's flash cache split per namespace);
`multistream`: the generated mixes of streams. The partition contract
(features/partition.toml) is the policy ABI's, in the kernel."""
