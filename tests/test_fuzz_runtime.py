"""The C runtime's fuzz regressions (runtime/tests/fuzz/, found by runtime/fuzz/ under
libFuzzer + ASan/UBSan): through the `flashrt` CLI each is one clear error naming the file and
line, and flashml's own ingest refuses the same input too. (`make -C runtime check` replays
them under the sanitizers; `make fuzz` runs the fuzzers.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_runtime import RUNTIME, build_runtime, run

from flashml.errors import TraceError
from flashml.trace.ingest import ingest

REGRESSIONS = sorted((RUNTIME / "tests" / "fuzz" / "trace").iterdir())


@pytest.mark.parametrize("src", REGRESSIONS, ids=lambda p: p.name)
def test_runtime_trace_regressions_are_clear_errors(src: Path, tmp_path: Path) -> None:
    build_runtime()
    proc = run("prepare-backing", "--backing", tmp_path / "b.img", "--trace", src)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"flashrt: error: {src}:"), proc.stderr
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert not (tmp_path / "b.img").exists()
    with pytest.raises(TraceError) as e:
        ingest(src, tmp_path / "o.parquet", progress=False)
    assert e.value.path == str(src) and e.value.line is not None


def test_fuzz_corpus_is_committed() -> None:
    for target in ("trace", "manifest"):
        assert any((RUNTIME / "fuzz" / "corpus" / target).iterdir()), target
        assert (RUNTIME / "fuzz" / f"fuzz_{target}.c").is_file()
        assert (RUNTIME / "fuzz" / f"{target}.dict").is_file()
