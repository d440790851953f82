"""A real block device under the cache: a throttled loop device (`throttled.ThrottledDevice`),
its seek time and bandwidth probed into the simulator's disk model (`probe`), and the shared
loop-device / cgroup helpers KML's testbed also uses (`host`)."""
