"""The C runtime's fuzz regressions (runtime/tests/fuzz/, found by runtime/fuzz/ under
libFuzzer + ASan/UBSan): through the `flashrt` CLI each is one clear error naming the file and
line, and flashml's own ingest refuses the same input too. (`make -C runtime check` replays
them under the sanitizers; `make fuzz` runs the fuzzers.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_support import RUNTIME, build_runtime, run

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


HEADER_202110 = ("#block_id io_offset io_size op_time op_name user_namespace user_name host_name "
                 "op_count\n")


@pytest.mark.parametrize("lines,line,message", [
    (["1 0 4096 10 1 2 3 hostA 1", "1 0 4096 11 1 2 3 hostB 0"], 3, "op_count 0 < 1"),
    (["1 0 0 10 1 2 3 hostA 0"], 2, "op_count 0 < 1"),  # a zero-size IO's too
    (["1 0 4096 10 1 2 3 hostA 2", "1 0 0 11 1 2 3 hostB 1048577"], 3,
     "op_count 1048577 > 1048576"),
])
def test_runtime_and_ingest_agree_on_op_count(tmp_path: Path, lines: list[str], line: int,
                                              message: str) -> None:
    """An op_count below 1 (the C reader took 0 as 1) or above 2^20: the C runtime's reader
    and flashml's ingest both refuse it, naming the same file, line and field."""
    build_runtime()
    src = tmp_path / "t.trace"
    src.write_text(HEADER_202110 + "\n".join(lines) + "\n")
    proc = run("prepare-backing", "--backing", tmp_path / "b.img", "--trace", src)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"flashrt: error: {src}:{line}: field 'op_count': "
                                  f"{message}"), proc.stderr
    assert not (tmp_path / "b.img").exists()
    with pytest.raises(TraceError, match=message) as e:
        ingest(src, tmp_path / "o.parquet", progress=False)
    assert (e.value.path, e.value.line, e.value.field) == (str(src), line, "op_count")
    assert not (tmp_path / "o.parquet").exists()
