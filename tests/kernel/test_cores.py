"""flashml/cores.py: a per-thread cap on the cores a piece of work uses."""

from __future__ import annotations

import threading

from flashml.cores import available, limited, machine


def test_limits_nest_restore_and_stay_in_their_thread() -> None:
    assert available() == machine() >= 1
    seen: dict[str, int] = {}
    with limited(1) as n:
        assert n == 1 and available() == 1
        with limited(3):
            assert available() == min(3, machine())
        assert available() == 1
        # another thread has no limit of its own
        t = threading.Thread(target=lambda: seen.setdefault("other", available()))
        t.start()
        t.join()
    assert seen["other"] == machine() and available() == machine()
    with limited(0):  # at least one core
        assert available() == 1


def test_the_tree_evaluator_and_the_searches_follow_the_limit() -> None:
    from flashml.models.forest import threads
    from flashml.systems.baleen.tuning import parallel_map

    with limited(1):
        assert threads() == 1
        ids = parallel_map(lambda _: threading.get_ident(), [0, 1, 2])
        assert set(ids) == {threading.get_ident()}  # one core: run in this thread
    assert threads() == machine()
