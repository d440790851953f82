"""Bad input: a clear message naming file, line and field; exit 1; no output left behind."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from conftest import DATA

HEADER = "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n"
GOOD = "310 0 131072 1572074461.5 1 24 3 5\n"

CASES = {
    # name: (format, file content, line, field, message fragment)
    "wrong field count": ("tectonic", HEADER + GOOD + "311 0 131072 1572074462.0 1 24 3\n",
                          3, "user_name", "expected 8 fields, found 7"),
    "too many fields": ("tectonic", HEADER + GOOD + "311 0 131072 1572074462.0 1 24 3 5 9\n",
                        3, "user_name", "expected 8 fields, found 9"),
    "non-number": ("tectonic", HEADER + GOOD + GOOD + "311 0 12x 1572074462.0 1 24 3 5\n",
                   4, "io_size", "expected an integer, found '12x'"),
    "bad time": ("tectonic", HEADER + "311 0 1 yesterday 1 24 3 5\n", 2, "op_time",
                 "expected a number"),
    "negative size": ("tectonic", HEADER + GOOD + "311 0 -5 1572074462.0 1 24 3 5\n", 3,
                      "io_size", "negative size -5"),
    "negative offset": ("tectonic", HEADER + "311 -1 5 1572074462.0 1 24 3 5\n", 2,
                        "io_offset", "negative offset -1"),
    "unknown op": ("tectonic", HEADER + GOOD + "311 0 5 1572074462.0 7 24 3 5\n", 3,
                   "op_name", "unknown op 7"),
    "beyond block": ("tectonic", HEADER + "311 8388000 4096 1572074462.0 1 24 3 5\n", 2,
                     "io_size", "exceeds the block size"),
    "time backwards": ("tectonic", HEADER + GOOD + "311 0 5 1572074400.0 1 24 3 5\n", 3,
                       "op_time", "time goes backwards"),
    "op_count zero": ("tectonic", "1 0 5 1.0 1 1 1 h 0\n", 1, "op_count", "op_count 0 < 1"),
    "msr unknown op": ("msr", "128166372003061629,web,0,Trim,0,4096,1\n", 1, "Type",
                       "unknown op 'Trim'"),
    "msr backwards": ("msr", "128166372003061629,web,0,Read,0,4096,1\n"
                      "128166372003061628,web,0,Read,0,4096,1\n", 2, "Timestamp",
                      "time goes backwards"),
    "cloudphysics opcode": ("cloudphysics", "version,time,op,size,lbn\n1,5,28,512,7\n1,6,35,0,0\n",
                            3, "op", "unknown SCSI opcode '35'"),
    "cloudphysics negative lbn": ("cloudphysics", "version,time,op,size,lbn\n1,5,28,512,-7\n", 2,
                                  "lbn", "negative lbn -7"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_names_file_line_field(tmp_path: Path, cli, name: str) -> None:
    fmt, content, line, field, fragment = CASES[name]
    src = tmp_path / "bad.trace"
    src.write_text(content)
    out = tmp_path / "out" / "t.parquet"
    proc = cli("trace", "ingest", src, "--format", fmt, "-o", out)
    assert proc.returncode == 1, proc.stderr
    assert f"{src}:{line}: field '{field}'" in proc.stderr, proc.stderr
    assert fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temporary file left behind either


def test_error_line_numbers_survive_chunking(tmp_path: Path) -> None:
    from flashml.errors import TraceError
    from flashml.trace.ingest import ingest

    src = tmp_path / "long.trace"
    body = "".join(f"{i} 0 4096 {1000 + i}.0 1 1 1 1\n" for i in range(5000))
    src.write_text(HEADER + body + "9 0 4096 9999.0 9 1 1 1\n")
    with pytest.raises(TraceError) as e:
        ingest(src, tmp_path / "o.parquet", "tectonic", chunk_bytes=1000, progress=False)
    assert (e.value.line, e.value.field) == (5002, "op_name")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("content,fragment", [
    ("", "no accesses"),
    (HEADER, "no accesses"),
    (HEADER + "310 0 0 1.0 1 1 1 1\n", "all had size 0"),
])
def test_empty_traces_are_errors(tmp_path: Path, cli, content: str, fragment: str) -> None:
    src = tmp_path / "empty.trace"
    src.write_text(content)
    proc = cli("trace", "ingest", src, "-o", tmp_path / "o.parquet")
    assert proc.returncode == 1 and fragment in proc.stderr, proc.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_missing_file_and_bad_options(tmp_path: Path, cli) -> None:
    proc = cli("trace", "ingest", tmp_path / "nope.trace", "-o", tmp_path / "o.parquet")
    assert proc.returncode == 1 and "nope.trace: no such file" in proc.stderr
    proc = cli("trace", "ingest", DATA / "generic.csv", "--format", "csv", "-o",
               tmp_path / "o.parquet")
    assert proc.returncode == 1 and "--columns" in proc.stderr
    proc = cli("trace", "ingest", DATA / "generic.csv", "--format", "csv", "--columns",
               "time=ts,key=nope,size=bytes", "-o", tmp_path / "o.parquet")
    assert proc.returncode == 1 and "'nope', which is not a column" in proc.stderr
    proc = cli("trace", "ingest", DATA / "tectonic_201910.trace", "--sample-ratio", "150",
               "-o", tmp_path / "o.parquet")
    assert proc.returncode == 2
    assert "argument --sample-ratio: must be at most 100 percent, got 150" in proc.stderr
    proc = cli("trace", "ingest", DATA / "tectonic_201910.trace", "--format", "nope",
               "-o", tmp_path / "o.parquet")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_corrupt_gzip_is_a_clear_error(tmp_path: Path, cli) -> None:
    src = tmp_path / "t.trace.gz"
    src.write_bytes(gzip.compress((HEADER + GOOD * 1000).encode())[:-40])
    proc = cli("trace", "ingest", src, "-o", tmp_path / "o.parquet")
    assert proc.returncode == 1, proc.stderr
    assert f"{src}: cannot decompress/read input" in proc.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_ingest_cli_success(tmp_path: Path, cli) -> None:
    out = tmp_path / "t.parquet"
    proc = cli("trace", "ingest", DATA / "tectonic_201910.trace", "-o", out, check=True)
    assert "4 accesses from 5 lines" in proc.stdout and "1 zero-size IOs dropped" in proc.stdout
    assert out.exists()
