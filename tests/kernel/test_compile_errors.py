"""The policy compiler on bad input: a clear one-line error and no partial bundle; policy .so
files with another ABI or contract are refused by every loader; compiling from MLflow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import flashml_sim
from flashml.compiler.build import CompileError, compile_policy
from flashml.compiler.bundle import save_policy_models
from flashml.compiler.loader import PolicyLibrary, load_policy, verify_bundle
from flashml.errors import UserError
from flashml.features.contract import contract
from flashml.simulation import SimConfig, simulate_policy

from conftest import python_argv
from demo_policy import DEMO_PARAMS, demo_trace, train_demo_models


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile_errors")


@pytest.fixture(scope="module")
def trace(work):
    return demo_trace(work / "trace", accesses=15_000, seed=11)


@pytest.fixture(scope="module")
def boosters(trace):
    return train_demo_models(trace, num_trees=5, num_leaves=7)


@pytest.fixture(scope="module")
def models(work, boosters) -> Path:
    return save_policy_models(work / "models", boosters, **DEMO_PARAMS)


@pytest.fixture
def bundle_copy(models, tmp_path) -> Path:
    d = tmp_path / "models"
    shutil.copytree(models, d)
    return d


def _no_leftovers(parent: Path, out: Path) -> None:
    assert not out.exists()
    assert [p.name for p in parent.iterdir() if p.name.startswith(".")] == []


def test_wrong_feature_count(bundle_copy, trace, tmp_path) -> None:
    import lightgbm as lgb

    from flashml.features.online import feature_matrix

    x = feature_matrix(trace)[:, :17]
    y = (x[:, 6] > 0).astype(int)
    b = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4},
                  lgb.Dataset(x, y), num_boost_round=2)
    b.save_model(str(bundle_copy / "admission.txt"))
    out = tmp_path / "out" / "policy"
    with pytest.raises(CompileError, match=r"admission.txt: model 'admission' has 17 features"
                                           r", the feature contract gives it 18"):
        compile_policy(out, model_dir=bundle_copy)
    _no_leftovers(out.parent, out)
    # save_policy_models refuses it up front too
    with pytest.raises(ValueError, match="has 17 features"):
        save_policy_models(tmp_path / "x", {"admission": b, "range_start": b, "range_end": b,
                                            "when": b}, **DEMO_PARAMS)


def test_wrong_model_in_place(bundle_copy, tmp_path) -> None:
    """A range model saved in place of the when model."""
    shutil.copy(bundle_copy / "range_start.txt", bundle_copy / "when.txt")
    out = tmp_path / "policy"
    with pytest.raises(CompileError, match="model 'when' has 6 features"):
        compile_policy(out, model_dir=bundle_copy)
    _no_leftovers(tmp_path, out)


def test_wrong_feature_names(bundle_copy, tmp_path) -> None:
    """Right count, other features (e.g. another contract's order)."""
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    x = rng.integers(0, 10, size=(500, 18)).astype(float)
    names = contract().names[::-1]
    b = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4},
                  lgb.Dataset(x, (x[:, 0] > 4).astype(int), feature_name=names),
                  num_boost_round=2)
    b.save_model(str(bundle_copy / "admission.txt"))
    with pytest.raises(CompileError, match="was trained on features"):
        compile_policy(tmp_path / "policy", model_dir=bundle_copy)
    _no_leftovers(tmp_path, tmp_path / "policy")


def test_missing_model(bundle_copy, tmp_path) -> None:
    (bundle_copy / "when.txt").unlink()
    out = tmp_path / "policy"
    with pytest.raises(CompileError, match=r"when.txt: missing model file"):
        compile_policy(out, model_dir=bundle_copy)
    _no_leftovers(tmp_path, out)


def test_garbage_model(bundle_copy, tmp_path) -> None:
    (bundle_copy / "range_end.txt").write_text("this is not a model\n")
    with pytest.raises(CompileError, match="range_end.txt: not a LightGBM text model"):
        compile_policy(tmp_path / "policy", model_dir=bundle_copy)
    _no_leftovers(tmp_path, tmp_path / "policy")


def test_contract_mismatch_in_bundle(bundle_copy, tmp_path) -> None:
    p = json.loads((bundle_copy / "policy.json").read_text())
    p["contract_hash"] = "0" * 64
    (bundle_copy / "policy.json").write_text(json.dumps(p))
    with pytest.raises(CompileError, match="contract mismatch"):
        compile_policy(tmp_path / "policy", model_dir=bundle_copy)
    _no_leftovers(tmp_path, tmp_path / "policy")


def test_bad_policy_json(bundle_copy, tmp_path) -> None:
    p = json.loads((bundle_copy / "policy.json").read_text())
    del p["eviction_age_s"]
    (bundle_copy / "policy.json").write_text(json.dumps(p))
    with pytest.raises(UserError, match="field 'eviction_age_s': missing"):
        compile_policy(tmp_path / "policy", model_dir=bundle_copy)
    p["eviction_age_s"] = 10.0
    p["admit_threshold"] = 1.5
    (bundle_copy / "policy.json").write_text(json.dumps(p))
    with pytest.raises(UserError, match=r"policy.json: field 'admit_threshold': expected a "
                       r"finite number in \[0, 1\], got 1.5"):
        compile_policy(tmp_path / "policy", model_dir=bundle_copy)
    _no_leftovers(tmp_path, tmp_path / "policy")


def test_compiler_failure(models, tmp_path) -> None:
    fake = tmp_path / "badcc"
    fake.write_text("#!/bin/sh\necho 'badcc: internal compiler error' >&2\nexit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "out" / "policy"
    with pytest.raises(CompileError, match=r"C compiler failed on .*exit 3.*internal compiler"):
        compile_policy(out, model_dir=models, cc=str(fake))
    _no_leftovers(out.parent, out)
    with pytest.raises(CompileError, match="C compiler 'no-such-cc' not found"):
        compile_policy(out, model_dir=models, cc="no-such-cc")


def test_existing_output(models, tmp_path) -> None:
    out = tmp_path / "policy"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(CompileError, match="not a policy bundle"):
        compile_policy(out, model_dir=models)
    assert (out / "precious.txt").read_text() == "keep me"
    shutil.rmtree(out)
    m1 = compile_policy(out, model_dir=models)
    m2 = compile_policy(out, model_dir=models)  # an earlier bundle is replaced
    assert m1["sha256"] == m2["sha256"]  # and the build is reproducible
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]


@pytest.fixture(scope="module")
def compiled(work, models) -> Path:
    out = work / "policy"
    compile_policy(out, model_dir=models)
    return out


def test_tampered_so_is_refused(compiled, trace, tmp_path) -> None:
    d = tmp_path / "policy"
    shutil.copytree(compiled, d)
    with open(d / "policy.so", "ab") as f:
        f.write(b"\0")
    with pytest.raises(UserError, match="does not match manifest.json"):
        verify_bundle(d)
    with pytest.raises(UserError, match="does not match manifest.json"):
        simulate_policy(trace, d, SimConfig(warmup_s=60.0))


def _fake_so(tmp_path: Path, abi: int, hash_: str, nf: int = 18) -> Path:
    src = tmp_path / f"fake{abi}.c"
    src.write_text(f"""
#include <stdint.h>
int flashml_policy_abi_version(void) {{ return {abi}; }}
int flashml_policy_num_features(void) {{ return {nf}; }}
const char *flashml_policy_contract_hash(void) {{ return "{hash_}"; }}
double flashml_admit_score(const double *f) {{ (void)f; return 1.0; }}
double flashml_admit_threshold(void) {{ return 0.5; }}
void flashml_prefetch_range(const double *f, int32_t *a, int32_t *b) {{ (void)f; *a = 0; *b = 0; }}
double flashml_prefetch_when_score(const double *f) {{ (void)f; return 0.0; }}
double flashml_prefetch_when_threshold(void) {{ return 0.5; }}
double flashml_target_write_rate_mbps(void) {{ return 1.0; }}
double flashml_eviction_age_s(void) {{ return 1.0; }}
""")
    so = tmp_path / f"fake-{abi}-{hash_[:4]}-{nf}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


@pytest.mark.parametrize("abi,hash_,nf,message", [
    (2, None, 18, "ABI version 2"),
    (1, "f" * 64, 18, "contract mismatch"),
    (1, None, 17, "17 features"),
])
def test_abi_and_contract_mismatch_refused(trace, tmp_path, abi, hash_, nf, message) -> None:
    so = _fake_so(tmp_path, abi, hash_ or contract().hash, nf)
    with pytest.raises(ValueError, match=message):
        flashml_sim.policy_info(str(so), unverified=True)
    with pytest.raises(ValueError, match=message):
        simulate_policy(trace, so, SimConfig(warmup_s=60.0), unverified=True)
    with pytest.raises(UserError, match=message):
        PolicyLibrary(so, unverified=True)


def test_not_a_policy(tmp_path) -> None:
    so = tmp_path / "empty.so"
    (tmp_path / "e.c").write_text("int nothing(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "e.c")],
                   check=True)
    with pytest.raises(ValueError, match="not a flashml policy: flashml_policy_abi_version"):
        flashml_sim.policy_info(str(so), unverified=True)
    with pytest.raises(ValueError, match="no such policy"):
        flashml_sim.policy_info(str(tmp_path / "missing.so"), unverified=True)


def test_cli_errors(cli, tmp_path, bundle_copy) -> None:
    r = cli("compile", "--model-dir", tmp_path / "nope", "-o", tmp_path / "out")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == f"flashml: error: {tmp_path / 'nope'}: no such " \
                                                "directory"
    (bundle_copy / "admission.txt").unlink()
    r = cli("compile", "--model-dir", bundle_copy, "-o", tmp_path / "out")
    assert r.returncode == 1 and "admission.txt: missing model file" in r.stderr
    assert not (tmp_path / "out").exists()
    r = cli("compile", "-o", tmp_path / "out")
    assert r.returncode == 2 and "one of the arguments" in r.stderr
    r = cli("compile", "--help")
    assert r.returncode == 0 and "manifest.json" in r.stdout


def test_compile_portable_is_the_builds():
    """`flashml compile --portable` restates compiler/build.py's evaluators (not imported by
    the CLI)."""
    from flashml.commands.compile import COMPILE_OPTIONS
    from flashml.compiler.build import PORTABLE_DEFAULT, PORTABLE_EVALUATORS

    o = COMPILE_OPTIONS["portable"]
    assert (o.default, o.choices) == (PORTABLE_DEFAULT, tuple(PORTABLE_EVALUATORS))


def test_compile_from_mlflow_run(models, trace, tmp_path) -> None:
    """--run-id and --model-uri download the bundle, and the compiled bundle is logged back."""
    env = dict(os.environ, FLASHML_HOME=str(tmp_path / "state"))
    env.pop("MLFLOW_TRACKING_URI", None)
    script = f"""
import json, sys
from flashml.compiler.build import compile_policy
from flashml.tracking import setup, tracking_uri
import mlflow
setup()
with mlflow.start_run() as run:
    mlflow.log_artifacts({str(models)!r}, artifact_path="policy")
rid = run.info.run_id
m1 = compile_policy({str(tmp_path / 'a')!r}, run_id=rid)
m2 = compile_policy({str(tmp_path / 'b')!r}, model_uri=f"runs:/{{rid}}/policy",
                    log_to_mlflow=False)
client = mlflow.tracking.MlflowClient(tracking_uri())
logged = sorted(f.path for f in client.list_artifacts(rid, "policy_so"))
print(json.dumps({{"rid": rid, "m1": m1, "m2": m2, "logged": logged}}))
"""
    proc = subprocess.run([*python_argv(), "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["m1"]["mlflow_run_id"] == out["rid"] == out["m2"]["mlflow_run_id"]
    assert out["m1"]["source"] == f"runs:/{out['rid']}/policy"
    assert out["m1"]["sha256"] == out["m2"]["sha256"]
    assert out["logged"] == ["policy_so/flashml_policy.h", "policy_so/manifest.json",
                             "policy_so/policy.so"]
    pol = load_policy(tmp_path / "a")
    assert np.isfinite(pol.admit_scores(np.zeros((3, 18)))).all()
