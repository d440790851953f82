"""Peak-aware admission (systems/baleen/peak.py): the busy hours come from the training window's
no-cache disk-head time, the simulator lowers the threshold exactly in those hours, and bad
schedules are refused where a user can write one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flashml.config import UNITS, MiB
from flashml.errors import UserError
from flashml.simulation import SimConfig, simulate
from flashml.systems.baleen.peak import busy_hours, hour_of_day, hourly_dt_profile

from conftest import access_table

DAY = 86_400.0 * 19_000  # a midnight, UTC
H = 3_600.0


def test_busy_hours_by_hand() -> None:
    # training day: hour 3 has three small GETs, hour 5 one 143 MiB GET (1 s of transfer),
    # hour 20 two small ones; the second day's huge read at hour 7 is outside the window.
    rows = [(DAY + 3 * H + i, 1, 0, 4096, 2) for i in range(3)]
    rows += [(DAY + 5 * H, 2, 0, 143 * MiB, 2)]
    rows += [(DAY + 20 * H + i, 3, 0, 4096, 1) for i in range(2)]
    rows += [(DAY + 86_400.0 + 7 * H, 4, 0, 10 * 143 * MiB, 2)]
    df = access_table(rows)
    prof = hourly_dt_profile(df, 86_400.0)
    small = UNITS.dt_seconds(1, 4096)
    assert prof[3] == pytest.approx(3 * small)
    assert prof[5] == pytest.approx(UNITS.t_seek_s + 1.0)
    assert prof[20] == pytest.approx(2 * small)
    assert prof[7] == 0.0 and prof.sum() == pytest.approx(5 * small + UNITS.t_seek_s + 1.0)
    # one block of consecutive hours, the one with the most disk-head time
    assert busy_hours(df, 86_400.0, 1) == (5,)
    assert busy_hours(df, 86_400.0, 2) == (4, 5)  # ties: the earlier first hour
    assert busy_hours(df, 86_400.0, 3) == (3, 4, 5)
    assert busy_hours(df, 86_400.0, 4) == (2, 3, 4, 5)
    assert busy_hours(df, 86_400.0, 0) == ()
    assert busy_hours(df, 86_400.0, 24) == tuple(range(24))


def test_busy_hours_are_one_block_around_a_quiet_hour() -> None:
    """A training day whose hour 11 is quiet between busy hours 10 and 12-19 (a 7-day
    region1-like trace's first day): the 9-hour schedule is one block that holds hour 11, not
    the nine busiest hours one by one, which left 11 out at the off-peak threshold while its
    neighbours took the writes, and its windows set the evaluation days' peak."""
    rows = []
    for h, n in {9: 3, 10: 8, 11: 2, **{h: 10 for h in range(12, 20)}, 20: 1}.items():
        rows += [(DAY + h * H + 60.0 * i, 100 * h + i, 0, 4096, 2) for i in range(n)]
    df = access_table(rows)
    assert busy_hours(df, 86_400.0, 9) == tuple(range(11, 20))
    assert busy_hours(df, 86_400.0, 10) == tuple(range(10, 20))
    # wrapping at midnight
    late = access_table([(DAY + h * H, h, 0, 4096, 2) for h in (22, 23, 0, 1) for _ in range(3)]
                        + [(DAY + 12 * H, 99, 0, 4096, 2)])
    assert busy_hours(late, 86_400.0, 4) == (0, 1, 22, 23)


def test_schedule_candidates() -> None:
    from flashml.settings import PeakSettings
    from flashml.systems.baleen.peak import schedule_candidates

    assert schedule_candidates(PeakSettings(hours=9, bonus=0.1)) == [(9, 0.1)]
    assert schedule_candidates(PeakSettings(hours=0, bonus=0.1)) == []
    assert schedule_candidates(PeakSettings(hours=9, bonus=0.0)) == []


def test_validation_picks_the_simplest_within_tolerance() -> None:
    """The shipped variant: the lowest held-out peak DT, but a schedule or Baleen's size
    features only when they beat the flat threshold with CacheLib-ML's features by more
    than the tolerance (a 10-minute window sets the peak: a smaller difference is noise)."""
    from flashml.systems.baleen.validation import Candidate, pick

    def c(fs: str, bonus: float, peak: float) -> Candidate:
        return Candidate(fs, (10, 11, 12) if bonus else (), bonus, peak_dt_util=peak)

    flat, sched = c("baleen", 0.0, 0.250), c("baleen", 0.1, 0.2485)
    cl_flat, cl_sched = c("cachelib_like", 0.0, 0.2495), c("cachelib_like", 0.1, 0.2460)
    assert pick([flat, sched]) is flat  # 0.6% better: within 1%
    assert pick([flat, sched, cl_flat]) is cl_flat  # 0.2% worse, fewer features
    assert pick([flat, sched, cl_flat, cl_sched]) is cl_sched  # 1.6% better
    far = c("baleen", 0.1, 0.240)
    assert pick([flat, far, cl_sched]) is far  # the simpler of the two within 1% of 0.240
    assert pick([c("baleen", 0.0, float("nan")), sched]) is sched
    with pytest.raises(ValueError, match="no candidate"):
        pick([c("baleen", 0.0, float("nan"))])


def test_zeroed_features_are_never_split_on() -> None:
    """CacheLib-ML's feature set as an 18-input model (what the compiled ABI takes): the size
    features are held at 0 in its rows, so its scores do not depend on them, while a model
    on all 18 learns the label from the size."""
    from flashml.features.contract import contract
    from flashml.settings import GbmParams
    from flashml.systems.baleen.model import TrainingData, score_all, train_policy
    from flashml.systems.baleen.validation import zeroed_features

    names = contract().names
    zeroed = zeroed_features("cachelib_like")
    assert set(zeroed) == {"start", "end", "size"} and zeroed_features("baleen") == ()
    rng = np.random.default_rng(1)
    X = rng.random((2000, len(names)))
    y = (X[:, names.index("size")] > 0.5).astype(np.float64)
    e = np.zeros(0)
    data = TrainingData(X, y, np.arange(2000, dtype=np.uint64), e.reshape(0, 1), e, e, e, e)
    gbm = GbmParams().with_overrides(num_boost_round=30)
    full = train_policy(data, gbm, with_prefetch=False)
    masked = train_policy(data, gbm, with_prefetch=False, zeroed=zeroed)
    assert masked.admission_features == names  # every input kept
    X2 = X.copy()
    X2[:, [names.index(n) for n in zeroed]] = rng.random((2000, 3))
    assert np.array_equal(score_all(masked, X)["score"], score_all(masked, X2)["score"])
    assert not np.array_equal(score_all(full, X)["score"], score_all(full, X2)["score"])


def test_hour_of_day() -> None:
    t = np.array([DAY, DAY + H - 1e-6, DAY + H, DAY - 1.0, -1.0, 23.5 * H])
    assert list(hour_of_day(t)) == [0, 0, 1, 23, 23, 23]


def test_simulator_lowers_the_threshold_in_peak_hours_only() -> None:
    """Two keys missed once each, both scoring 0.45 against a threshold of 0.5: with a bonus
    of 0.1 in hour 14 only the miss at 14:30 is admitted, then hits on its re-read."""
    rows = [(DAY + 9.5 * H, 1, 0, 131072, 2), (DAY + 9.6 * H, 1, 0, 131072, 2),
            (DAY + 14.5 * H, 2, 0, 131072, 2), (DAY + 14.6 * H, 2, 0, 131072, 2)]
    df = access_table(rows)
    score = np.full(4, 0.45)
    cfg = SimConfig(sample_ratio=1.0, cache_gb=1.0, admission="threshold", threshold=0.5,
                    warmup_s=0.0)
    flat = simulate(df, cfg, score=score).metrics
    assert flat["backend_ios"] == 4 and flat["admitted_segments"] == 0
    peak = simulate(df, cfg.replace(peak_hours=(14,), peak_bonus=0.1), score=score).metrics
    assert peak["admitted_segments"] == 1 and peak["backend_ios"] == 3
    off = simulate(df, cfg.replace(peak_hours=(9,), peak_bonus=0.04), score=score).metrics
    assert off["admitted_segments"] == 0  # 0.45 < 0.5 - 0.04
    with pytest.raises(ValueError, match="peak hours"):
        simulate(df, cfg.replace(peak_hours=(24,), peak_bonus=0.1), score=score)
    with pytest.raises(ValueError, match="peak bonus"):
        simulate(df, cfg.replace(peak_hours=(3,), peak_bonus=1.5), score=score)


@pytest.mark.parametrize("field,value,match", [
    ("peak_hours", [3, 3], "duplicate entries"),
    ("peak_hours", [24], "an hour of the day, 0..23"),
    ("peak_hours", "3", "distinct hours"),
    ("peak_bonus", -0.1, r"\[0, 1\]"),
    ("peak_bonus", "x", "expected a finite number"),
])
def test_policy_json_refuses_a_bad_schedule(tmp_path, field, value, match) -> None:
    from flashml.compiler.bundle import POLICY_JSON, read_policy_json

    params = {"contract_hash": "x", "admit_threshold": 0.5, "when_threshold": 0.5,
              "eviction_age_s": 7200.0, "target_write_rate_mbps": 35.599, field: value}
    (tmp_path / POLICY_JSON).write_text(json.dumps(params))
    with pytest.raises(UserError, match=match) as e:
        read_policy_json(tmp_path)
    assert field in str(e.value)


def test_sim_cli_peak_options(cli, tmp_path) -> None:
    r = cli("sim", "run", "--trace", tmp_path / "none.parquet", "--peak-hours", "3,25")
    assert r.returncode == 2 and "--peak-hours" in r.stderr and "0..23" in r.stderr
    r = cli("pipeline", "run", "--preset", "region1-like", "--out", tmp_path / "o",
            "--peak-bonus", "2")
    assert r.returncode == 2 and "--peak-bonus: must be at most 1" in r.stderr
    assert not (tmp_path / "o" / "summary.json").exists()
