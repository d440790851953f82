"""The feature contract: one definition, checked everywhere, and exact counts."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import flashml_sim
from flashml.config import UNITS
from flashml.features import abi, codegen
from flashml.features.contract import CONTRACT_PATH, contract, load
from flashml.features.online import admission_features, feature_matrix, hourly_counts

from conftest import access_table

SEG = UNITS.segment_bytes
H = 3600.0


def table(rows: list[tuple[float, int, int, int, int]]) -> pl.DataFrame:
    return access_table(rows, namespace=3, user=7)


def naive_counts(df: pl.DataFrame, hours: int = 6) -> list[list[int]]:
    """For each row: GET IOs and GET segments of its block in each earlier-or-current hour
    bucket, counting only rows before it."""
    out = []
    rows = df.select("time", "key", "offset", "size", "op").rows()
    for i, (t, k, _o, _s, _op) in enumerate(rows):
        hb = int(t // H)
        bc = [0] * hours
        sc = [0] * hours
        for t2, k2, o2, s2, op2 in rows[:i]:
            if k2 != k or op2 not in (1, 2, 5):
                continue
            age = hb - int(t2 // H)
            if 0 <= age < hours:
                bc[age] += 1
                sc[age] += (o2 + s2 - 1) // SEG - o2 // SEG + 1
        out.append(bc + sc)
    return out


def test_hand_computed_example() -> None:
    df = table([
        (10.0, 1, 0, SEG, 2),            # block 1: first GET, 1 segment
        (20.0, 1, 0, 3 * SEG, 1),        # same hour: sees 1 IO, 1 segment
        (30.0, 1, 0, SEG, 4),            # a PUT: never counted
        (H + 5, 1, SEG, SEG, 2),         # next hour: h2 = 2 IOs, 4 segments (+ PUT ignored)
        (H + 6, 2, 0, SEG, 2),           # another block: nothing
        (6 * H + 1, 1, 0, SEG, 2),       # 6 hours after the first bucket: only h6 = bucket 1
    ])
    f = admission_features(df)
    assert f.columns == contract().names
    assert f["start"].to_list() == [0, 0, 0, 1, 0, 0]
    assert f["end"].to_list() == [0, 2, 0, 1, 0, 0]
    assert f["size"].to_list() == [SEG, 3 * SEG, SEG, SEG, SEG, SEG]
    assert f["block_count_h1"].to_list() == [0, 1, 2, 0, 0, 0]
    assert f["segment_count_h1"].to_list() == [0, 1, 4, 0, 0, 0]
    assert f["block_count_h2"].to_list() == [0, 0, 0, 2, 0, 0]
    assert f["segment_count_h2"].to_list() == [0, 0, 0, 4, 0, 0]
    assert f["block_count_h6"].to_list() == [0, 0, 0, 0, 0, 1]   # hour bucket 1 (3601..)
    assert f["block_count_h5"].to_list()[5] == 0
    assert f["op"].to_list() == [2, 1, 4, 2, 2, 2]
    assert f["namespace"].to_list() == [3.0] * 6
    # the matrix the models and the C ABI take: the same values, row-major
    m = feature_matrix(df)
    assert m.flags["C_CONTIGUOUS"] and m.dtype == np.float64
    np.testing.assert_array_equal(m, f.to_numpy())


@pytest.mark.parametrize("seed", range(5))
def test_hourly_counts_match_naive_loop(seed: int) -> None:
    rnd = random.Random(seed)
    t = rnd.uniform(0, 5000)
    rows = []
    for _ in range(400):
        t += rnd.choice([0.0, 1.0, 60.0, 900.0, 3599.0, 3600.0, 7000.0])
        size = rnd.choice([1, SEG, 3 * SEG + 5, 2 * 1024 * 1024])
        off = rnd.randrange(0, 8 * 1024 * 1024 - size + 1, 4096)
        rows.append((t, rnd.randrange(6), off, size, rnd.choice([1, 2, 3, 4, 5, 6])))
    df = table(rows)
    got = hourly_counts(df).rows()
    assert [list(r) for r in got] == naive_counts(df)


def test_generated_code_is_fresh_and_matches_everywhere(tmp_path: Path) -> None:
    assert codegen.main(["--check"]) == 0
    c = contract()
    assert flashml_sim.CONTRACT_HASH == c.hash
    assert flashml_sim.NUM_FEATURES == c.num_features == 18
    assert list(flashml_sim.FEATURE_NAMES) == c.names
    # the C header compiles under the project's flags and reports the same identity
    prog = tmp_path / "p.c"
    prog.write_text('#include "flashml_policy.h"\n#include <stdio.h>\n'
                    'int main(void) { printf("%d %d %s %d\\n", FLASHML_POLICY_ABI_VERSION, '
                    "FLASHML_POLICY_NUM_FEATURES, FLASHML_POLICY_CONTRACT_HASH, "
                    "FLASHML_F_SEGMENT_COUNT_H6); return 0; }\n")
    exe = tmp_path / "p"
    subprocess.run([shutil.which("gcc") or "gcc", "-std=c11", "-Wall", "-Wextra", "-Werror",
                    f"-I{codegen.C_HEADER.parent}", str(prog), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(abi.ABI_VERSION), "18", c.hash, "17"]


def test_hash_changes_with_the_contract_not_comments(tmp_path: Path) -> None:
    text = CONTRACT_PATH.read_text()
    p = tmp_path / "c.toml"
    p.write_text("# another comment\n" + text)
    assert load(p).hash == contract().hash
    p.write_text(text.replace("hours = 6", "hours = 5").replace("hour = 6\n", "hour = 5\n"))
    assert load(p).hash != contract().hash
    swapped = text.replace('name = "namespace"', 'name = "TMP"').replace(
        'name = "user"', 'name = "namespace"').replace('name = "TMP"', 'name = "user"')
    p.write_text(swapped)
    assert load(p).hash != contract().hash


def test_model_subsets() -> None:
    c = contract()
    assert c.indices("range") == [0, 1, 2, 3, 4, 5]
    assert "size" not in c.models["cachelib_like"] and "start" not in c.models["cachelib_like"]
    assert len(c.indices("cachelib_like")) == 15
    assert np.all(np.diff(c.indices("cachelib_like")) > 0)
