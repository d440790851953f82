"""Streaming text input: transparent .gz/.zst decompression and newline-aligned chunks."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flashml.errors import TraceError

CHUNK_BYTES = 16 * 1024 * 1024


def open_binary(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """Open `path` for reading, decompressing .gz/.zst by suffix or magic bytes.

    Returns (stream, raw file); the raw file's position tracks progress through the input.
    """
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, expected a trace file")
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller through the returned stream
    magic = raw.read(4)
    raw.seek(0)
    if path.suffix == ".gz" or magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    if path.suffix == ".zst" or magic == b"\x28\xb5\x2f\xfd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True), raw
    return raw, raw


@dataclass
class Chunk:
    """Whole lines of the input. `line_numbers[i]` is the 1-based source line of data row i."""

    data: bytes
    line_numbers: np.ndarray
    comments: list[tuple[int, str]]


def iter_chunks(stream: BinaryIO, path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """Yield newline-aligned chunks with comment ('#') and blank lines taken out."""
    next_line = 1
    rest = b""
    while True:
        try:
            buf = stream.read(chunk_bytes)
        except (OSError, EOFError) as e:
            raise TraceError(path, f"cannot decompress/read input ({e})") from None
        if not buf:
            if rest:
                yield _split(rest, next_line)
            return
        buf = rest + buf
        cut = buf.rfind(b"\n")
        if cut < 0:
            rest = buf
            continue
        rest = buf[cut + 1:]
        body = buf[: cut + 1]
        chunk = _split(body, next_line)
        next_line += body.count(b"\n")
        yield chunk


def _split(body: bytes, first_line: int) -> Chunk:
    if b"\r" in body:
        body = body.replace(b"\r", b"")
    trimmed = body[:-1] if body.endswith(b"\n") else body
    # Leading comment/blank lines (a file's header) are taken off cheaply, line by line.
    comments: list[tuple[int, str]] = []
    while trimmed.startswith((b"#", b"\n", b" ")):
        line, _, rest = trimmed.partition(b"\n")
        if line.strip().startswith(b"#"):
            comments.append((first_line, line.strip().decode("utf-8", "replace")))
        elif line.strip():
            break
        trimmed, first_line = rest, first_line + 1
    if not trimmed:
        return Chunk(b"", np.zeros(0, dtype=np.uint64), comments)
    if b"#" not in trimmed and b"\n\n" not in trimmed:
        n = trimmed.count(b"\n") + 1
        return Chunk(trimmed, np.arange(first_line, first_line + n, dtype=np.uint64), comments)
    # Comments or blank lines inside the data: the slow, exact path.
    keep: list[bytes] = []
    numbers: list[int] = []
    for i, line in enumerate(trimmed.split(b"\n")):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(b"#"):
            comments.append((first_line + i, stripped.decode("utf-8", "replace")))
            continue
        keep.append(line)
        numbers.append(first_line + i)
    return Chunk(b"\n".join(keep), np.asarray(numbers, dtype=np.uint64), comments)


def first_data_line(path: Path) -> tuple[str | None, list[str]]:
    """The first non-comment line (stripped) and the comment lines before it."""
    stream, raw = open_binary(path)
    comments: list[str] = []
    try:
        for line in io.TextIOWrapper(stream, encoding="utf-8", errors="replace"):
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                comments.append(s)
                continue
            return s, comments
        return None, comments
    finally:
        stream.close()
        raw.close()
