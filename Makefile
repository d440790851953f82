# flashml: the two commands are `make demo` (set up + run the main job) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export CARGO_TERM_QUIET := true

.PHONY: setup demo test lint docs test-rust test-c test-python bench clean regress fuzz conformance \
	cluster-test cluster-bench mount-bench device-bench

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/flashml pipeline run

# One clippy pass, with the bindings: it lints the pure core too (no code is compiled only
# without them), and `cargo test` builds the core without them.
lint: setup
	$(VENV)/bin/ruff check .
	cd sim && cargo fmt --check
	cd sim && cargo clippy --all-targets --features python -- -D warnings

# The dev profile: half the CPU of a release build with LTO, and integer overflow panics
# instead of wrapping silently.
test-rust:
	cd sim && cargo test

# Three workers on two cores: about a quarter of the suite's wall time is tests waiting on a
# server, a browser or a JVM they started (Airflow, MLflow's UI, Chromium, Spark, the
# cluster), and a third worker runs another test file meanwhile (docs/design/testing.md).
PYTEST_WORKERS ?= 3
test-python: setup
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile -q

test-c:
	$(MAKE) -C runtime check

# The documentation site (mkdocs.yml, docs/) -> site/: strict build (a broken link or anchor
# fails), then every internal link and anchor resolved and nothing loaded from outside the site.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(PY) scripts/check_docs_site.py site

test: setup lint docs test-rust test-c test-python

# Model-regression check: a candidate trained by this checkout vs regress/baseline/ (compiled
# here) on a pinned, generated evaluation trace; exit 1 on a regression (docs/how-to/verify-a-bundle.md).
regress: setup
	bash regress/run.sh

# The scaled-out topology (docker-compose.yml) run natively: scripts/cluster.sh starts Postgres,
# the MLflow server, a Spark master + 2 workers and Airflow 3 on 127.0.0.1; the whole
# tests/services/test_cluster.py on a small job (the DAG under the real scheduler, the main job
# scaled out and equal to the embedded run, and the faults: the MLflow server restarted mid-sweep,
# the scheduler killed mid-DAG, a Spark worker killed mid-episodes; about 20 minutes at a
# load average of 15 on 2 cores); `make test` runs its fast part (about 3 minutes).
cluster-test: setup
	FLASHML_CLUSTER_FULL=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/services/test_cluster.py

# The cluster's figures (bench/results/cluster.json; docs/how-to/scale-out.md and README's
# "Scaling out" rendered from it): start-up, the 1 M-access main job scaled out vs embedded,
# the sweep with 2 workers vs 1, the DAG under the scheduler vs dag.test(), the three faults.
cluster-bench: setup
	flock /tmp/flashml-timing.lock $(PY) bench/bench_cluster.py

# The mount's overhead on hits (bench/results/mount.json): p50/p99 of reads through `flashrt
# mount` that hit vs direct preads of the flash file; root and FUSE (it says when they lack).
mount-bench: setup
	flock /tmp/flashml-timing.lock $(PY) bench/bench_mount.py

# The simulator's DT against a throttled loop device's busy time (bench/results/device.json;
# flashml/device/check.py): a generated trace played through the mount window by window with
# admit-all, RejectX and the demo bundle; root, loop devices, an io cgroup and FUSE.
device-bench: setup
	flock /tmp/flashml-timing.lock $(PY) bench/bench_device.py

# `make bench` then renders docs/measurements.md's tables (and quality.png) from the new results.
bench: setup
	$(PY) bench/run.py
	$(PY) bench/render_measurements.py --plots --write

# flashml side by side with the Baleen artifact's simulator (docs/reference/simulator.md, "Flash mode vs BCacheSim"):
# FLASHML_BCACHESIM=/path/to/BCacheSim (commit ddeb2d8) [FLASHML_BCACHESIM_PYTHON=its python]
conformance: setup
	$(PY) bench/bench_conformance.py

# Fuzzing (docs/design/fuzzing.md; not part of `make test`, which runs a small fixed-seed set):
# FUZZ_CASES mutated inputs per format through every trace reader, object reader, bundle
# loader and settings parser (Hypothesis, random seeds); the C runtime's trace and manifest
# parsers under libFuzzer + ASan/UBSan for FUZZ_SECONDS each (runtime/fuzz/); kill -9 at
# random points of ingest and of the main job, then a rerun (tests/trust/test_fuzz_kill.py); the
# adversarial suite's full catalogue (tests/adversarial/: hostile numbers for every option,
# outputs that are inputs, FIFOs, tampered bundles, two runs on one output) ->
# bench/results/adversarial.json (its subset runs in `make test`: tests/trust/test_adversarial.py).
FUZZ_CASES ?= 1000
FUZZ_SECONDS ?= 600
fuzz: setup
	FLASHML_FUZZ_PROFILE=fuzz FLASHML_FUZZ_CASES=$(FUZZ_CASES) $(VENV)/bin/pytest -n 2 \
		--dist loadfile -q -p no:cacheprovider tests/trust/test_fuzz_traces.py \
		tests/trust/test_fuzz_inputs.py tests/trust/test_fuzz_cut_lines.py \
		tests/trust/test_fuzz_runtime.py
	FLASHML_FUZZ_SLOW=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/trust/test_fuzz_kill.py \
		tests/kernel/test_trace_bounds.py
	$(MAKE) -C runtime/fuzz run FUZZ_SECONDS=$(FUZZ_SECONDS)
	$(PY) bench/bench_adversarial.py

clean:
	rm -rf .flashml sim/target site
