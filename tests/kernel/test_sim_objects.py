"""Object-cache mode: libCacheSim's miss ratios on the CloudPhysics sample, and agreement with
the Python reference on random request streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashml.simulation import parse_capacity, simulate_objects
from flashml.trace.objects import read_objects

import reference_sim as ref
from conftest import SHARED

CLOUDPHYSICS = SHARED / "traces" / "cloudphysics-sample.csv"
MiB = 1 << 20

# ../shared/traces/README.md: libCacheSim cachesim miss ratios
LIBCACHESIM = [
    ("lru", 1 * MiB, "bytes", 0.8646),
    ("lru", 16 * MiB, "bytes", 0.8346),
    ("lru", 1000, "objects", 0.8327),
    ("fifo", 1 * MiB, "bytes", 0.8766),
    ("fifo", 1000, "objects", 0.8388),
]


@pytest.fixture(scope="module")
def cloudphysics():
    assert CLOUDPHYSICS.exists(), f"{CLOUDPHYSICS} missing: ../shared must sit beside the repo"
    return read_objects(CLOUDPHYSICS, "cloudphysics")


@pytest.mark.parametrize("policy, capacity, unit, expected", LIBCACHESIM)
def test_reproduces_libcachesim(cloudphysics, policy, capacity, unit, expected):
    r = simulate_objects(cloudphysics["key"], cloudphysics["size"], capacity, policy, unit)
    assert r["requests"] == 113_872
    assert round(r["miss_ratio"], 4) == expected
    assert r["miss_ratio"] == (r["requests"] - r["hits"]) / r["requests"]
    slow = ref.simulate_objects(cloudphysics["key"].to_list(), cloudphysics["size"].to_list(),
                                capacity, policy, unit)
    assert slow["hits"] == r["hits"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    reqs=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), min_size=1, max_size=200),
    capacity=st.integers(1, 120),
    policy=st.sampled_from(["lru", "fifo"]),
    unit=st.sampled_from(["bytes", "objects"]),
)
def test_matches_reference(reqs, capacity, policy, unit):
    keys = np.array([k for k, _ in reqs], dtype=np.uint64)
    sizes = np.array([s for _, s in reqs], dtype=np.uint64)
    r = simulate_objects(keys, sizes, capacity, policy, unit)
    want = ref.simulate_objects(keys.tolist(), sizes.tolist(), capacity, policy, unit)
    assert (r["requests"], r["hits"], r["miss_ratio"]) == (
        want["requests"], want["hits"], want["miss_ratio"])


@pytest.mark.parametrize("text, expected", [
    ("4MiB", (4 * MiB, "bytes")), ("16MB", (16_000_000, "bytes")), ("1048576", (MiB, "bytes")),
    ("5000obj", (5000, "objects")), ("1 GiB", (1 << 30, "bytes")), ("0.5KiB", (512, "bytes")),
    ("7objects", (7, "objects")),
])
def test_parse_capacity(text, expected):
    assert parse_capacity(text) == expected


@pytest.mark.parametrize("text", ["", "0", "0MiB", "-4MiB", "4XB", "1.5obj", "MiB", "abc"])
def test_parse_capacity_rejects(text):
    with pytest.raises(ValueError):
        parse_capacity(text)


def test_invalid_inputs_are_value_errors():
    k = np.array([1, 2], dtype=np.uint64)
    with pytest.raises(ValueError, match="capacity"):
        simulate_objects(k, k, 0)
    with pytest.raises(ValueError, match="unknown eviction"):
        simulate_objects(k, k, 10, "arc")
    with pytest.raises(ValueError, match="unit"):
        simulate_objects(k, k, 10, "lru", "pages")
    with pytest.raises(ValueError, match="'size' has 1"):
        simulate_objects(k, k[:1], 10)
    with pytest.raises(ValueError, match="no requests"):
        simulate_objects(k[:0], k[:0], 10)
    with pytest.raises(ValueError, match="negative"):
        simulate_objects(np.array([-1, 2]), k, 10)
