"""A policy bundle is code: every loader maps exactly the bytes its manifest vouches for.

Tampered bundles (a swapped policy.so beside a manifest that names an untouched copy, a bare
.so, lying manifests for --mat, symlinks, FIFOs) and a race that flips policy.so between a
good and an evil file while the loaders load it: an "evil" .so whose constructor writes a
marker file must never run (0 markers), and every load is either refused or runs the good
code. The shared manifest corpus (tests/data/manifests/) runs through the Python loader.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from manifest_corpus import CORPUS, apply_case

from flashml.compiler.build import compile_policy
from flashml.compiler.loader import PolicyLibrary, load_policy, verify_bundle
from flashml.errors import UserError
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features.abi import ABI_VERSION
from flashml.features.contract import contract

from conftest import run_cli
from demo_policy import demo_trace, write_demo_bundle

FUZZ = os.environ.get("FLASHML_FUZZ_PROFILE") == "fuzz"
#: In-process loads per loader in the race (a small .so loads in well under a millisecond).
RACE_LOADS = 5000 if FUZZ else 1000
#: `flashml sim run --policy` processes in the race (each a few seconds of interpreter start).
RACE_CLI_RUNS = 50 if FUZZ else 6
MARKER_ENV = "FLASHML_TEST_MARKER"
EVIL_THRESHOLD = 0.123

EVIL_C = r"""
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void flashml_test_evil(void) {
    const char *p = getenv("%(env)s");
    if (p) {
        int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) { (void)!write(fd, "x", 1); close(fd); }
    }
}
int flashml_policy_abi_version(void) { return %(abi)d; }
int flashml_policy_num_features(void) { return %(nf)d; }
const char *flashml_policy_contract_hash(void) { return "%(hash)s"; }
double flashml_admit_score(const double *f) { (void)f; return 1.0; }
double flashml_admit_threshold(void) { return %(thr)r; }
double flashml_target_write_rate_mbps(void) { return 1.0; }
double flashml_eviction_age_s(void) { return 1.0; }
void flashml_prefetch_range(const double *f, int32_t *a, int32_t *b) { (void)f; *a = 0; *b = 0; }
double flashml_prefetch_when_score(const double *f) { (void)f; return 0.0; }
double flashml_prefetch_when_threshold(void) { return 0.5; }
int flashml_evict_num_features(void) { return %(enf)d; }
const char *flashml_evict_contract_hash(void) { return "%(ehash)s"; }
double flashml_evict_predict(const double *f) { (void)f; return 1e300; }
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("trust")


@pytest.fixture(scope="module")
def trace_file(work) -> Path:
    demo_trace(work / "trace", accesses=15_000, seed=5)
    (table,) = (work / "trace").glob("*.parquet")
    return table


@pytest.fixture(scope="module")
def good(work, trace_file) -> Path:
    """A small real compiled admission bundle."""
    from flashml.trace.canonical import read_table

    df = read_table(trace_file)[0]
    models = write_demo_bundle(df, work / "models", admit_threshold=0.6, when_threshold=0.4,
                               num_trees=3, num_leaves=4)
    out = work / "good"
    compile_policy(out, model_dir=models, log_to_mlflow=False, fast=False)
    return out


@pytest.fixture(scope="module")
def evil(work) -> Path:
    """A .so exporting the admission ABI (and flashml_evict_predict) whose constructor
    appends to the file named by $FLASHML_TEST_MARKER."""
    src = work / "evil.c"
    src.write_text(EVIL_C % {"env": MARKER_ENV, "abi": ABI_VERSION,
                             "nf": contract().num_features, "hash": contract().hash,
                             "thr": EVIL_THRESHOLD, "enf": eviction.contract().num_features,
                             "ehash": eviction.contract().hash})
    so = work / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    return so


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    """The marker file the evil constructor would write, named in this process's and its
    children's environment."""
    m = tmp_path / "EVIL-RAN"
    monkeypatch.setenv(MARKER_ENV, str(m))
    return m


def copy_bundle(good: Path, dst: Path) -> Path:
    shutil.copytree(good, dst)
    return dst


def write_manifest(d: Path, m: dict[str, Any]) -> None:
    (d / "manifest.json").write_text(json.dumps(m, indent=1))


def manifest(d: Path) -> dict[str, Any]:
    return json.loads((d / "manifest.json").read_text())


def cli(*args: Any, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_cli(*map(str, args), timeout=timeout)


def last_error(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else ""


# --- tampered bundles -----------------------------------------------------------------------

def test_swapped_so_beside_a_manifest_naming_a_good_copy(good, evil, marker, trace_file,
                                                         tmp_path) -> None:
    """The manifest's policy_so names an untouched copy (good.so); policy.so is the evil one:
    every loader maps the file the manifest vouches for, never policy.so."""
    d = copy_bundle(good, tmp_path / "swapped")
    os.rename(d / "policy.so", d / "good.so")
    shutil.copy(evil, d / "policy.so")
    write_manifest(d, {**manifest(d), "policy_so": "good.so"})
    ref = cli("sim", "run", "--trace", trace_file, "--policy", good, "--json")
    assert ref.returncode == 0, ref.stderr
    r = cli("sim", "run", "--trace", trace_file, "--policy", d, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["admitted_segments"] == \
        json.loads(ref.stdout)["admitted_segments"]
    lib = load_policy(d)
    assert lib.admit_threshold == 0.6 and lib.path == d / "good.so"
    from flashml.simulation import policy_info

    assert policy_info(d)["admit_threshold"] == 0.6
    # the .so the user names must be the one the manifest vouches for
    with pytest.raises(UserError, match="vouches for good.so, not policy.so"):
        PolicyLibrary(d / "policy.so")
    assert not marker.exists()


@pytest.mark.parametrize("extra", ["eviction", "partition", "readahead"])
def test_a_claimed_capability_the_so_does_not_export_is_refused(good, trace_file, tmp_path,
                                                                 extra) -> None:
    """A manifest listing a capability whose functions the .so lacks is refused before the
    .so is mapped, on the Rust path (sim run --policy) as on the ctypes one."""
    d = copy_bundle(good, tmp_path / "extra")
    m = manifest(d)
    write_manifest(d, {**m, "capabilities": [*m["capabilities"], extra]})
    r = cli("sim", "run", "--trace", trace_file, "--policy", d, "--json")
    assert r.returncode == 1 and f"claims the {extra} capability" in last_error(r), r.stderr
    with pytest.raises(UserError, match=f"claims the {extra} capability"):
        load_policy(d)


def test_bare_so_is_refused_unless_unverified(good, evil, marker, trace_file,
                                              tmp_path) -> None:
    bare = tmp_path / "evil.so"
    shutil.copy(evil, bare)
    r = cli("sim", "run", "--trace", trace_file, "--policy", bare, "--json")
    assert r.returncode == 1
    assert last_error(r) == (f"flashml: error: {bare}: refused: no manifest.json beside it "
                             "vouches for this .so (give the `flashml compile -o DIR` folder; "
                             "--unverified loads a bare .so anyway)")
    folder = tmp_path / "no-manifest"
    folder.mkdir()
    shutil.copy(evil, folder / "policy.so")
    r = cli("sim", "run", "--trace", trace_file, "--policy", folder, "--json")
    assert r.returncode == 1 and "manifest.json: missing" in last_error(r)
    for call in (lambda: load_policy(bare), lambda: PolicyLibrary(bare),
                 lambda: PolicyLibrary(folder / "policy.so", need="eviction")):
        with pytest.raises(UserError, match="refused|missing"):
            call()
    assert not marker.exists()
    # --unverified: loaded anyway (from a sealed copy), loud in the log and in the output
    plain = tmp_path / "plain.so"
    shutil.copy(good / "policy.so", plain)
    r = cli("sim", "run", "--trace", trace_file, "--policy", plain, "--json", "--unverified")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["unverified"] is True and out["policy_sha256"] == sha256(plain)
    assert "WARNING" in r.stderr and "UNVERIFIED" in r.stderr
    lib = PolicyLibrary(plain, unverified=True)
    assert lib.unverified and lib.sha256 == sha256(plain) and lib.admit_threshold == 0.6


def _mat_bundle(d: Path, so: Path, **fields: Any) -> Path:
    d.mkdir()
    shutil.copy(so, d / "policy.so")
    m = {"format": "flashml-policy-bundle/1", "abi_version": ABI_VERSION,
         "capabilities": ["eviction"], "evict_contract_hash": eviction.contract().hash,
         "policy_so": "policy.so", "sha256": sha256(so), "size_bytes": so.stat().st_size,
         **fields}
    write_manifest(d, m)
    return d


@pytest.mark.parametrize("case,fields,message", [
    ("wrong-sha", {"sha256": "0" * 64}, "does not match manifest.json"),
    ("wrong-contract", {"evict_contract_hash": "f" * 64}, "eviction contract mismatch"),
    ("empty-capabilities", {"capabilities": [], "system": "mat"},
     "(capabilities [])"),
    ("knobs-only", {"capabilities": [], "system": "pannier", "policy_so": None},
     "no eviction capability"),
    ("no-eviction-capability", {"capabilities": ["admission", "prefetch"]},
     "no eviction capability"),
])
def test_mat_bundle_is_verified(evil, marker, trace_file, tmp_path, case, fields,
                                message) -> None:
    """`flashml sim run --mat DIR` verifies the bundle (sha256, eviction contract,
    capabilities) before mapping anything."""
    d = _mat_bundle(tmp_path / case, evil, **fields)
    if fields.get("policy_so", "") is None:
        m = manifest(d)
        for k in ("policy_so", "sha256", "size_bytes", "abi_version"):
            m.pop(k)
        write_manifest(d, m)
    r = cli("sim", "run", "--trace", trace_file, "--mat", d, "--json")
    assert r.returncode == 1, r.stdout
    assert message in last_error(r), r.stderr
    assert not marker.exists()


def test_mat_control_shows_the_marker_works(evil, marker, trace_file, tmp_path) -> None:
    """The control: the evil .so loaded on the user's word (--unverified) is mapped, and its
    constructor's marker appears: the tests above would see it run. (A manifest vouching for
    it is refused before mapping: it lacks most of the eviction functions.)"""
    d = _mat_bundle(tmp_path / "vouched", evil)
    r = cli("sim", "run", "--trace", trace_file, "--mat", d, "--json")
    assert r.returncode == 1 and "does not export flashml_evict" in last_error(r), r.stderr
    assert not marker.exists()
    bare = tmp_path / "bare" / "evil.so"
    bare.parent.mkdir()
    shutil.copy(evil, bare)
    r = cli("sim", "run", "--trace", trace_file, "--policy", bare, "--unverified", "--json")
    assert r.returncode == 0 and "UNVERIFIED" in r.stderr, r.stderr
    assert marker.exists()


def test_partition_bundle_swapped(good, evil, marker, trace_file, tmp_path) -> None:
    """`flashml sim partition --bundle DIR` with a manifest vouching for other.so while
    policy.so is evil: the vouched-for file is the one read (and refused before it is mapped:
    it has no partition network), policy.so never."""
    d = tmp_path / "part"
    d.mkdir()
    shutil.copy(good / "policy.so", d / "other.so")
    shutil.copy(evil, d / "policy.so")
    so = d / "other.so"
    write_manifest(d, {"format": "flashml-policy-bundle/1", "abi_version": ABI_VERSION,
                       "capabilities": ["partition"],
                       "partition_contract_hash": partition_contract.contract().hash,
                       "policy_so": "other.so", "sha256": sha256(so),
                       "size_bytes": so.stat().st_size})
    r = cli("sim", "partition", "--trace", trace_file, "--capacity", 200, "--interval", 2000,
            "--policy", "even,mlcache", "--bundle", d, "--json")
    assert r.returncode == 1
    assert f"{so}: refused: {d / 'manifest.json'} claims the partition capability" \
        in last_error(r), r.stderr
    assert not marker.exists()


def test_symlinked_so_is_refused(good, evil, marker, tmp_path) -> None:
    """policy.so as a symlink (even to a file whose sha256 matches): refused, never
    followed."""
    for target in (good / "policy.so", evil):
        d = copy_bundle(good, tmp_path / f"link-{target.stem}")
        (d / "policy.so").unlink()
        (d / "policy.so").symlink_to(target)
        with pytest.raises(UserError, match=r"policy.so: a symbolic link; refused"):
            load_policy(d)
        from flashml.simulation import policy_info

        with pytest.raises(UserError, match="a symbolic link; refused"):
            policy_info(d)
    d = copy_bundle(good, tmp_path / "link-manifest")
    os.rename(d / "manifest.json", tmp_path / "m.json")
    (d / "manifest.json").symlink_to(tmp_path / "m.json")
    with pytest.raises(UserError, match=r"manifest.json: a symbolic link; refused"):
        verify_bundle(d)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["policy.so", "manifest.json"])
def test_fifo_is_refused_without_hanging(good, marker, trace_file, tmp_path, name) -> None:
    d = copy_bundle(good, tmp_path / "fifo")
    (d / name).unlink()
    os.mkfifo(d / name)
    r = cli("sim", "run", "--trace", trace_file, "--policy", d, "--json", timeout=120)
    assert r.returncode == 1
    assert last_error(r) == f"flashml: error: {d / name}: a FIFO, not a regular file; refused"
    with pytest.raises(UserError, match="a FIFO, not a regular file"):
        load_policy(d)
    assert not marker.exists()


# --- the race -------------------------------------------------------------------------------

class Flipper:
    """Flips DIR/policy.so between a good and an evil file by rename (so it is always a
    whole regular file) until stopped."""

    def __init__(self, d: Path, good_so: Path, evil_so: Path) -> None:
        self.d, self.files = d, (good_so, evil_so)
        self.flips = 0
        self.started = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        tmp = self.d / ".flip"
        while not self.stop.is_set():
            src = self.files[self.flips % 2]
            os.link(src, tmp)
            os.replace(tmp, self.d / "policy.so")
            self.flips += 1
            if self.flips >= 4:
                self.started.set()

    def __enter__(self) -> Flipper:
        self.thread.start()
        assert self.started.wait(60)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def race_dir(good, evil, tmp_path) -> tuple[Path, Path, Path]:
    d = copy_bundle(good, tmp_path / "race")
    side = tmp_path / "side"
    side.mkdir()
    shutil.copy(good / "policy.so", side / "good.so")
    shutil.copy(evil, side / "evil.so")
    return d, side / "good.so", side / "evil.so"


def test_flip_race_in_process(race_dir, marker) -> None:
    """RACE_LOADS loads through the Python loader (ctypes) and as many through the Rust
    simulator's (policy_info) while policy.so flips: each is refused or runs the good code;
    the evil constructor never runs."""
    from flashml.simulation import policy_info

    d, good_so, _ = race_dir
    want = sha256(good_so)
    counts = {"python-ok": 0, "python-refused": 0, "rust-ok": 0, "rust-refused": 0}
    with Flipper(d, *race_dir[1:]) as flipper:
        for _ in range(RACE_LOADS):
            try:
                lib = load_policy(d)
            except UserError as e:
                assert "does not match manifest.json" in str(e), e
                counts["python-refused"] += 1
            else:
                assert lib.sha256 == want and lib.admit_threshold == 0.6
                lib.close()
                counts["python-ok"] += 1
            try:
                info = policy_info(d)
            except (UserError, ValueError) as e:
                assert "does not match manifest.json" in str(e), e
                counts["rust-refused"] += 1
            else:
                assert info["admit_threshold"] == 0.6
                counts["rust-ok"] += 1
    assert flipper.flips >= 4
    assert counts["python-ok"] + counts["python-refused"] == RACE_LOADS, counts
    assert counts["rust-ok"] + counts["rust-refused"] == RACE_LOADS, counts
    assert not marker.exists(), counts


def test_flip_race_through_the_cli(race_dir, marker, trace_file) -> None:
    """`flashml sim run --policy DIR` processes while policy.so flips: rc 0 with the good
    policy's results, or a refusal naming the sha256 mismatch; never the evil code."""
    d, good_so, _ = race_dir
    shutil.copy(good_so, d / "policy.so")
    ref = cli("sim", "run", "--trace", trace_file, "--policy", d, "--json")
    assert ref.returncode == 0, ref.stderr
    want = json.loads(ref.stdout)
    outcomes = []
    with Flipper(d, *race_dir[1:]):
        procs = [subprocess.Popen(
            [sys.executable, "-m", "flashml.cli", "sim", "run", "--trace", str(trace_file),
             "--policy", str(d), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for _ in range(2)]
        for i in range(RACE_CLI_RUNS):
            p = procs[i % 2]
            out, err = p.communicate(timeout=600)
            if p.returncode == 0:
                got = json.loads(out)
                assert got["admitted_segments"] == want["admitted_segments"]
            else:
                assert p.returncode == 1 and "does not match manifest.json" in err, err
            outcomes.append(p.returncode)
            if i + 2 < RACE_CLI_RUNS:
                procs[i % 2] = subprocess.Popen(
                    [sys.executable, "-m", "flashml.cli", "sim", "run", "--trace",
                     str(trace_file), "--policy", str(d), "--json"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
    assert len(outcomes) == RACE_CLI_RUNS
    assert not marker.exists()


# --- the manifest schema ----------------------------------------------------------------------



def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30
    kinds = {json.loads(p.read_text())["expect"] for p in CORPUS}
    assert kinds == {"ok", "refused"}


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_manifest_corpus(good, evil, marker, tmp_path, path) -> None:
    case = json.loads(path.read_text())
    d = copy_bundle(good, tmp_path / "b")
    (d / "manifest.json").write_text(apply_case(manifest(good), case))
    try:
        lib = load_policy(d)
    except UserError as e:
        msg = str(e)
        assert case["expect"] == "refused", f"{case['name']}: refused: {msg}"
        want = case["message_contains"]
        want = [want] if isinstance(want, str) else want
        assert any(w.lower() in msg.lower() for w in want), (case["name"], msg)
        assert msg.startswith(str(d)), msg  # names the bundle or its file
    else:
        assert case["expect"] == "ok", f"{case['name']}: loaded"
        assert lib.admit_threshold == 0.6
        lib.close()
    assert not marker.exists()


@pytest.mark.parametrize("field,value,message", [
    ("eviction_age_s", -1, "field 'eviction_age_s': expected a finite number > 0 (seconds), "
                           "got -1"),
    ("target_write_rate_mbps", 0, "field 'target_write_rate_mbps': expected a finite number > "
                                  "0 (MB/s), got 0"),
    ("admit_threshold", "0.5", "field 'admit_threshold': expected a finite number in [0, 1], "
                               "got '0.5'"),
    ("admit_threshold", True, "field 'admit_threshold': expected a finite number in [0, 1], "
                              "got true"),
    ("when_threshold", "x", "field 'when_threshold': expected a finite number in [0, 1]"),
    ("peak_hours", [1, 1], "field 'peak_hours': duplicate entries"),
])
def test_compile_refuses_bad_knobs(good, work, tmp_path, field, value, message) -> None:
    models = tmp_path / "models"
    shutil.copytree(work / "models", models)
    p = json.loads((models / "policy.json").read_text())
    p[field] = value
    (models / "policy.json").write_text(json.dumps(p))
    with pytest.raises(UserError) as e:
        compile_policy(tmp_path / "out", model_dir=models, log_to_mlflow=False, fast=False)
    assert str(e.value) == f"{models / 'policy.json'}: {message}" or \
        str(e.value).startswith(f"{models / 'policy.json'}: {message}"), str(e.value)
    assert not (tmp_path / "out").exists()


def test_compile_cli_names_the_field(good, work, tmp_path) -> None:
    models = tmp_path / "models"
    shutil.copytree(work / "models", models)
    p = json.loads((models / "policy.json").read_text())
    p["eviction_age_s"] = -1
    (models / "policy.json").write_text(json.dumps(p))
    r = cli("compile", "--model-dir", models, "-o", tmp_path / "out", "--no-log")
    assert r.returncode == 1
    assert last_error(r) == (f"flashml: error: {models / 'policy.json'}: field "
                             "'eviction_age_s': expected a finite number > 0 (seconds), got -1")


def test_pannier_knobs_only_bundle_stays_valid(tmp_path) -> None:
    from flashml.compiler.manifest import parse_manifest

    m = {"format": "flashml-policy-bundle/1", "system": "pannier", "capabilities": [],
         "knobs": {"container_bytes": 4194304, "erase_bytes": 2097152, "promotion_pct": 5.0,
                   "lifetime_pct": 95.0, "ghost_factor": 1.0, "tire_slack": 2.0,
                   "tire_steps": 3, "quantum_s": 300.0, "open_in_cache": False,
                   "page_bytes": 4096, "lifespan_epbpd": 5.0},
         "tuned_on": "t", "tuned_with_ram_pct": 10.0, "flashml_version": "0"}
    assert parse_manifest(json.dumps(m).encode(), "m.json") == m
    d = tmp_path / "pannier"
    d.mkdir()
    write_manifest(d, m)
    with pytest.raises(UserError, match="no admission capability"):
        load_policy(d)


def test_a_process_loads_more_bundles_than_it_has_descriptors(good) -> None:
    """Every load maps a fresh memfd under a name no loaded object has. ctypes never unloads,
    and a closed memfd's number comes back for the next one: a loader that told names apart
    by holding descriptors ran out of them (here 64) after a few dozen loads in one process
    ("no free descriptor name"), as a long test worker or training process does."""
    code = (
        "import resource, sys\n"
        "from flashml.compiler.loader import load_policy\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit("
        "resource.RLIMIT_NOFILE)[1]))\n"
        "libs = [load_policy(sys.argv[1]) for _ in range(300)]\n"
        "names = {p.lib._name for p in libs}\n"
        "print(len(libs), len(names))\n")
    out = subprocess.run([sys.executable, "-c", code, str(good)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["300", "300"]
