#!/usr/bin/env bash
# One-time (and idempotent) setup: .venv with every dependency, the project in editable mode,
# and the Rust simulator (flashml_sim) built by maturin. A second run with nothing changed
# takes about a second: each step is skipped while the hash of its inputs is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
STAMPS="$VENV/.flashml-stamps"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites --------------------------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3.11 python3.12 python3.13 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      PY=$c; break
    fi
  done
fi
[ -n "$PY" ] || die "Python 3.11+ not found (set PYTHON=/path/to/python3.11)"
command -v cargo >/dev/null 2>&1 || die "Rust (cargo) not found: install it with rustup"
command -v java >/dev/null 2>&1 || die "Java 17 not found (PySpark needs it)"
command -v gcc >/dev/null 2>&1 || die "gcc not found"
command -v make >/dev/null 2>&1 || die "make not found"

hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# --- virtual environment and Python dependencies --------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
mkdir -p "$STAMPS"
if [ ! -x "$VENV/bin/uv" ]; then
  say "installing uv (fast resolver/installer) into .venv"
  "$VENV/bin/python" -m pip install -q uv
fi
deps_hash=$(hash_of pyproject.toml requirements.lock)
if [ "$(cat "$STAMPS/deps" 2>/dev/null)" != "$deps_hash" ]; then
  say "installing Python dependencies (requirements.lock) and flashml in editable mode"
  VIRTUAL_ENV="$VENV" "$VENV/bin/uv" pip install -q -r requirements.lock -e ".[dev]"
  # The registry mirror answers every revalidation as modified, so uv re-downloads and
  # rebuilds the pyspark sdist (~0.5-1.4 GB) on each fresh install and keeps every old copy;
  # pruning keeps the shared cache at one copy (it had grown to 60 GB and filled the disk).
  "$VENV/bin/uv" cache prune --ci -q 2>/dev/null || say "uv cache prune failed (ignored)"
  echo "$deps_hash" > "$STAMPS/deps"
else
  say "Python dependencies up to date"
fi

# Bytecode for every installed module, written once here (for a fresh install and for a venv
# installed before this step existed): uv installs none by default, and with
# PYTHONDONTWRITEBYTECODE set (as on some CI images) every process would compile mlflow,
# great_expectations, optuna... from source again: 11.5 s per `import mlflow, ...` instead of 5.
if [ "$(cat "$STAMPS/bytecode" 2>/dev/null)" != "$deps_hash" ]; then
  say "compiling the installed packages to bytecode"
  "$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 \
    || say "compileall reported errors (some vendored test files do not compile; ignored)"
  echo "$deps_hash" > "$STAMPS/bytecode"
fi
"$VENV/bin/python" -m compileall -q -j 0 flashml >/dev/null 2>&1 || true

# --- the Rust simulator ---------------------------------------------------------------------
sim_hash=$(hash_of sim/Cargo.toml sim/Cargo.lock sim/pyproject.toml $(find sim/src -type f | sort))
if [ "$(cat "$STAMPS/sim" 2>/dev/null)" != "$sim_hash" ] || ! "$VENV/bin/python" -c 'import flashml_sim' 2>/dev/null; then
  say "building flashml_sim (Rust, release) with maturin"
  (cd sim && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release -q >&2)
  echo "$sim_hash" > "$STAMPS/sim"
else
  say "flashml_sim up to date"
fi
"$VENV/bin/flashml" --version >/dev/null || die "flashml CLI did not install"

# --- the C runtime (flashrt, libflashrt; make rebuilds only what changed) --------------------
say "building the C runtime (runtime/build/flashrt)"
make -s -C runtime all >&2 || die "the C runtime did not build (runtime/Makefile)"
say "ready: $VENV/bin/flashml, runtime/build/flashrt"
