"""The compiler's object cache (compiler/objcache.py): an unchanged model links cached objects
into the same bytes; a changed model, threshold, header or compiler compiles again; a
tampered, damaged or linked entry is refused and compiled again; an unsafe cache folder is
not used; two compiles at once share one cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flashml.compiler import objcache
from flashml.compiler.build import compile_policy
from flashml.compiler.bundle import save_policy_models
from flashml.compiler.loader import load_policy, verify_bundle

from conftest import python_argv
from demo_policy import DEMO_PARAMS, demo_trace, train_demo_models


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile_cache")


@pytest.fixture(scope="module")
def boosters(work):
    return train_demo_models(demo_trace(work / "trace", accesses=15_000, seed=11),
                             num_trees=5, num_leaves=7)


@pytest.fixture(scope="module")
def models(work, boosters) -> Path:
    return save_policy_models(work / "models", boosters, **DEMO_PARAMS)


@pytest.fixture(scope="module")
def fresh(work, models) -> dict:
    """The bundle compiled without any cache: the bytes every cached compile must give."""
    return compile_policy(work / "fresh", model_dir=models, cache=False)


@pytest.fixture(scope="module")
def filled(work, models) -> tuple[Path, dict]:
    """A cache filled by one compile of the bundle into an empty cache, and that compile's
    manifest; a test copies the folder (cached_copy) instead of compiling it again (an
    entry's key holds no path: a copy is the same cache)."""
    cache = work / "filled-cache"
    return cache, compile_policy(work / "filled", model_dir=models, cache=cache)


def cached_copy(filled: tuple[Path, dict], tmp_path: Path) -> Path:
    """tmp_path/cache: a copy of the filled cache, modes included."""
    return Path(shutil.copytree(filled[0], tmp_path / "cache", symlinks=True))


def _stats(m: dict) -> dict:
    return m["build"]["object_cache"]


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "objects").glob("*/*") if not p.name.endswith(".tmp"))


def test_unchanged_model_links_cached_objects_into_the_same_bytes(models, fresh, filled,
                                                                  tmp_path) -> None:
    cache, first = cached_copy(filled, tmp_path), filled[1]
    n = _stats(first)["compiled"]
    assert n >= 5 and _stats(first)["hits"] == 0  # four models' units and the wrapper
    assert len(_entries(cache)) == n
    second = compile_policy(tmp_path / "b", model_dir=models, cache=cache)
    assert _stats(second) == {"hits": n, "compiled": 0, "refused": 0}
    # no temporary path in an object: cached or not, the same .so
    assert first["sha256"] == second["sha256"] == fresh["sha256"]
    verify_bundle(tmp_path / "b")
    lib = load_policy(tmp_path / "b")
    assert lib.admit_threshold == DEMO_PARAMS["admit_threshold"]


def test_default_folder_and_off(monkeypatch, tmp_path) -> None:
    from flashml.config import cache_dir

    monkeypatch.delenv("FLASHML_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "flashml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "flashml"
    monkeypatch.setenv("FLASHML_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("FLASHML_CACHE_DIR", "off")
    assert cache_dir() is None


def test_changed_threshold_recompiles_only_the_wrapper(boosters, models, filled,
                                                       tmp_path) -> None:
    cache = cached_copy(filled, tmp_path)
    other = save_policy_models(tmp_path / "models2", boosters,
                               **{**DEMO_PARAMS, "admit_threshold": 0.625})
    m = compile_policy(tmp_path / "b", model_dir=other, cache=cache)
    # the thresholds are baked into the wrapper only: the trees' objects are reused
    assert _stats(m)["compiled"] == 1 and _stats(m)["hits"] >= 4
    assert load_policy(tmp_path / "b").admit_threshold == 0.625  # not the stale 0.5
    assert m["sha256"] == compile_policy(tmp_path / "c", model_dir=other,
                                         cache=False)["sha256"]


def test_changed_model_recompiles_its_units(work, models, filled, tmp_path) -> None:
    cache = cached_copy(filled, tmp_path)
    trace = demo_trace(work / "trace", accesses=15_000, seed=11)
    changed = save_policy_models(tmp_path / "models2",
                                 train_demo_models(trace, num_trees=6, num_leaves=7), **DEMO_PARAMS)
    m = compile_policy(tmp_path / "b", model_dir=changed, cache=cache)
    assert _stats(m)["compiled"] >= 5  # every model changed, and the wrapper with them
    assert m["sha256"] == compile_policy(tmp_path / "c", model_dir=changed,
                                         cache=False)["sha256"]
    assert {i["num_trees"] for i in m["models"].values()} == {6}


def test_another_compiler_does_not_reuse_objects(models, fresh, filled, tmp_path) -> None:
    cache = cached_copy(filled, tmp_path)
    cc = shutil.which(os.environ.get("CC") or "cc")
    assert cc is not None
    wrapper = tmp_path / "bin" / "mycc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {cc} "$@"\n')
    wrapper.chmod(0o755)
    m = compile_policy(tmp_path / "b", model_dir=models, cache=cache, cc=str(wrapper))
    assert _stats(m)["hits"] == 0
    assert m["sha256"] == fresh["sha256"]


def test_key_covers_headers_and_flags(tmp_path) -> None:
    src = tmp_path / "x.c"
    src.write_text('#include "h.h"\nint f(void) { return X; }\n')
    (tmp_path / "h.h").write_text("#define X 1\n")
    argv = ["cc", "-O1", "-c", "x.c", "-o", "x.o"]
    k1 = objcache.object_key("tc", argv, tmp_path, "x.c")
    (tmp_path / "h.h").write_text("#define X 2\n")
    k2 = objcache.object_key("tc", argv, tmp_path, "x.c")
    k3 = objcache.object_key("tc", ["cc", "-O2", *argv[2:]], tmp_path, "x.c")
    k4 = objcache.object_key("tc2", argv, tmp_path, "x.c")
    assert len({k1, k2, k3, k4}) == 4
    assert objcache.object_key("tc2", argv, tmp_path, "x.c") == k4
    with pytest.MonkeyPatch.context() as mp:  # an include path from the environment
        mp.setenv("C_INCLUDE_PATH", str(tmp_path / "inc"))
        assert objcache.object_key("tc2", argv, tmp_path, "x.c") != k4


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "symlink", "entry gone"])
def test_tampered_entry_is_refused_and_compiled_again(models, fresh, filled, tmp_path,
                                                      damage) -> None:
    cache = cached_copy(filled, tmp_path)
    entries = _entries(cache)
    victims = entries if damage != "symlink" else entries[:1]
    for e in victims:
        obj = e / objcache.OBJECT_NAME
        if damage == "flipped byte":  # same size, other bytes: only the sha256 tells
            _flip_a_byte(obj)
        elif damage == "truncated":
            obj.write_bytes(obj.read_bytes()[:100])
        elif damage == "symlink":  # the same bytes, behind a link: refused all the same
            real = tmp_path / "elsewhere.o"
            shutil.copyfile(obj, real)
            obj.unlink()
            obj.symlink_to(real)
        else:
            (e / objcache.ENTRY_NAME).unlink()
    m = compile_policy(tmp_path / "b", model_dir=models, cache=cache)
    assert _stats(m)["hits"] == len(entries) - len(victims)
    if damage != "entry gone":
        assert _stats(m)["refused"] == len(victims)
    # the shipped .so is the clean one, and the cache holds good entries again
    assert m["sha256"] == fresh["sha256"]
    verify_bundle(tmp_path / "b")
    again = compile_policy(tmp_path / "c", model_dir=models, cache=cache)
    assert _stats(again) == {"hits": len(entries), "compiled": 0, "refused": 0}
    assert again["sha256"] == fresh["sha256"]


def test_cache_folder_writable_by_others_is_not_used(models, fresh, filled, tmp_path) -> None:
    cache = cached_copy(filled, tmp_path)
    _flip_a_byte(_entries(cache)[0] / objcache.OBJECT_NAME)
    for e in _entries(cache):  # a consistent forgery: object and entry agree
        data = (e / objcache.OBJECT_NAME).read_bytes()
        meta = json.loads((e / objcache.ENTRY_NAME).read_text())
        meta["sha256"] = objcache._sha256_bytes(data)
        (e / objcache.ENTRY_NAME).write_text(json.dumps(meta))
    os.chmod(cache, 0o777)  # ... planted by another user: the folder is not used at all
    m = compile_policy(tmp_path / "b", model_dir=models, cache=cache)
    assert m["build"]["object_cache"] is None
    assert m["sha256"] == fresh["sha256"]


def test_pruned_to_its_byte_budget(tmp_path) -> None:
    c = objcache.ObjectCache.open(tmp_path / "cache")
    assert c is not None
    c.max_bytes = 2500
    for i in range(5):
        obj = tmp_path / f"{i}.o"
        obj.write_bytes(bytes([i]) * 1000)
        key = f"{i:02d}" + "0" * 62
        c.store(key, obj, ["cc", "-c", "x.c", "-o", "x.o"])
        os.utime(c._entry(key) / objcache.ENTRY_NAME, (1000 + i, 1000 + i))
    assert len(_entries(tmp_path / "cache")) == 5
    c.prune()
    left = [p.name[:2] for p in _entries(tmp_path / "cache")]
    assert left == ["03", "04"]  # the least recently used went first


def test_two_compiles_at_once_share_the_cache(models, fresh, tmp_path) -> None:
    cache = tmp_path / "cache"
    code = ("import sys; from flashml.compiler.build import compile_policy; "
            "m = compile_policy(sys.argv[1], model_dir=sys.argv[2], cache=sys.argv[3]); "
            "print(m['sha256'])")
    procs = [subprocess.Popen([*python_argv(), "-c", code, str(tmp_path / f"out{i}"),
                               str(models), str(cache)], stdout=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [fresh["sha256"]] * 2
    for e in _entries(cache):  # every published entry is whole and verifies
        meta = json.loads((e / objcache.ENTRY_NAME).read_text())
        assert objcache._sha256_bytes((e / objcache.OBJECT_NAME).read_bytes()) == meta["sha256"]
    assert not [p for p in (cache / "objects").glob("*/*") if p.name.endswith(".tmp")]
    m = compile_policy(tmp_path / "again", model_dir=models, cache=cache)
    assert _stats(m)["compiled"] == 0


def test_compile_ahead_fills_the_cache_the_compile_stage_links_from(models, fresh, tmp_path,
                                                                     monkeypatch) -> None:
    """The main job's compile stage starts compiling in a child process when `train` ends
    (systems/baleen/job.py CompileAhead); the stage then links the objects it cached."""
    from flashml.systems.baleen.compile_ahead import CompileAhead

    cache = tmp_path / "cache"
    monkeypatch.setenv("FLASHML_CACHE_DIR", str(cache))
    ahead = CompileAhead(models)
    ahead.finish()
    assert not ahead.tmp.exists()  # its own output is not kept
    m = compile_policy(tmp_path / "stage", model_dir=models)
    assert _stats(m)["compiled"] == 0 and _stats(m)["hits"] >= 5
    assert m["sha256"] == fresh["sha256"]
    stopped = CompileAhead(models)  # a job that ends first stops it
    stopped.stop()
    assert stopped.proc.returncode is not None and not stopped.tmp.exists()
