#!/usr/bin/env bash
# `make regress`: the CI model-regression check (docs/how-to/verify-a-bundle.md).
#
# Trains a candidate policy with this checkout's code on a pinned training trace, compiles it
# and the committed baseline (regress/baseline/: LightGBM text models + policy.json), and runs
# `flashml regress` on a pinned evaluation trace. Both traces are generated deterministically
# from a preset and a seed (regress/settings.env); no trace or binary is kept in git.
#
#   bash regress/run.sh                    # the check (exit 1 on a regression)
#   bash regress/run.sh --update-baseline  # accept the current candidate as the new baseline
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=regress/settings.env
source regress/settings.env
FLASHML=${FLASHML:-.venv/bin/flashml}
OUT=${REGRESS_DIR:-.flashml/regress}
export FLASHML_HOME="$OUT/state" MLFLOW_TRACKING_URI="" FLASHML_OPTUNA_STORAGE=""
mkdir -p "$OUT"
t0=$SECONDS
"$FLASHML" trace generate --preset "$PRESET" --seed "$TRAIN_SEED" --accesses "$ACCESSES" \
  --quiet -o "$OUT/train.trace" >/dev/null
"$FLASHML" trace generate --preset "$PRESET" --seed "$EVAL_SEED" --accesses "$ACCESSES" \
  --quiet -o "$OUT/eval.trace" >/dev/null
rm -rf "$OUT/candidate" "$OUT/candidate-compiled" "$OUT/baseline-compiled"
# shellcheck disable=SC2086
"$FLASHML" train --trace "$OUT/train.trace" $TRAIN_ARGS -o "$OUT/candidate" >"$OUT/train.log" 2>&1 \
  || { cat "$OUT/train.log"; exit 1; }
if [ "${1:-}" = "--update-baseline" ]; then
  mkdir -p regress/baseline
  cp "$OUT"/candidate/{admission,range_start,range_end,when}.txt "$OUT/candidate/policy.json" \
    regress/baseline/
  # the committed baseline carries no MLflow run id (it names no store)
  .venv/bin/python - <<'PY'
import json, pathlib
p = pathlib.Path("regress/baseline/policy.json")
d = json.loads(p.read_text()); d.pop("mlflow_run_id", None)
p.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
PY
  echo "regress/baseline updated from $OUT/candidate"
fi
"$FLASHML" compile --model-dir regress/baseline -o "$OUT/baseline-compiled" --no-log >/dev/null
"$FLASHML" compile --model-dir "$OUT/candidate" -o "$OUT/candidate-compiled" --no-log >/dev/null
"$FLASHML" regress --candidate "$OUT/candidate-compiled" --baseline "$OUT/baseline-compiled" \
  --trace "$OUT/eval.trace" --tolerance "$TOLERANCE"
echo "regress: done in $((SECONDS - t0)) s"
