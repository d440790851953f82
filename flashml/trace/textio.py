"""Streaming text input: transparent .gz/.zst decompression and newline-aligned chunks.

Hostile input is refused with a `TraceError` naming the file (and the line where one is at
fault): unreadable files, corrupt or truncated compressed streams, a line longer than the
chunk (no newline: binary data), never a traceback or unbounded memory. A UTF-8 byte-order
mark at the start of the input is skipped.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flashml.errors import TraceError
from flashml.trace.limits import CHUNK_BYTES

MIN_LINE_LIMIT = 1024 * 1024
"""A line may be as long as the chunk size, and at least this long (bytes)."""
BOM = b"\xef\xbb\xbf"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# A blank (or whitespace-only) line anywhere in a chunk, the last one included.
_BLANK_LINE = re.compile(rb"(?:^|\n)[ \t]*(?:\n|\Z)")


class _ZstdStream(io.RawIOBase):
    """A zstd stream (one or more frames) that raises on a truncated last frame, where
    zstandard's own stream reader would stop silently and lose the tail of the trace."""

    def __init__(self, raw: BinaryIO, path: Path) -> None:
        import zstandard

        self._zstd = zstandard
        self._raw, self._path = raw, path
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._started = False
        self._buf = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            data = self._raw.read(1 << 20)
            if not data:
                if self._started and not self._obj.eof:
                    raise EOFError("zstd stream ends in the middle of a frame (truncated)")
                break
            while data:
                if self._obj.eof:  # the next frame
                    self._obj = self._zstd.ZstdDecompressor().decompressobj()
                    self._started = False
                self._started = True
                self._buf += self._obj.decompress(data)
                data = self._obj.unused_data if self._obj.eof else b""
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out


_DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)


def _decode_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:  # pragma: no cover - zstandard is a dependency
        return _DECODE_ERRORS
    return (*_DECODE_ERRORS, zstandard.ZstdError)


def check_input(path: Path) -> None:
    """A TraceError unless `path` is a regular file (after symlinks): missing, a folder, or
    a FIFO, socket or device (opening a FIFO would wait for a writer for ever, and a trace
    is read more than once)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except (OSError, ValueError) as e:
        raise TraceError(path, f"cannot open ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISDIR(mode):
        raise TraceError(path, "is a directory, expected a trace file")
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a regular file")
        raise TraceError(path, f"is {kind}, not a regular file: give the trace as a file "
                         "(it is read more than once)")


def open_binary(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """Open `path` for reading, decompressing .gz/.zst by suffix or magic bytes.

    Returns (stream, raw file); the raw file's position tracks progress through the input.
    """
    check_input(path)
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller through the returned stream
        magic = raw.read(4)
        raw.seek(0)
    except OSError as e:
        raise TraceError(path, f"cannot open ({e.strerror or e})") from None
    if path.suffix == ".gz" or magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw  # type: ignore[return-value]
    if path.suffix == ".zst" or magic == _ZSTD_MAGIC:
        return _ZstdStream(raw, path), raw  # type: ignore[return-value]
    return raw, raw


def read_block(stream: BinaryIO, path: Path, n: int) -> bytes:
    """`stream.read(n)`, a corrupt or truncated compressed input as a TraceError."""
    try:
        return stream.read(n)
    except _decode_errors() as e:
        raise TraceError(path, f"cannot decompress/read input ({e})") from None


@dataclass
class Chunk:
    """Whole lines of the input. `line_numbers[i]` is the 1-based source line of data row i."""

    data: bytes
    line_numbers: np.ndarray
    comments: list[tuple[int, str]]


def iter_chunks(stream: BinaryIO, path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """Yield newline-aligned chunks with comment ('#') and blank lines taken out. The last
    line may lack its newline. A line longer than max(chunk_bytes, MIN_LINE_LIMIT) is an
    error (a text trace has short lines; this bounds memory on binary or hostile input)."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    limit = max(chunk_bytes, MIN_LINE_LIMIT)
    next_line = 1
    rest = b""
    first = True
    while True:
        buf = read_block(stream, path, chunk_bytes)
        if first and buf:
            while len(buf) < len(BOM) and BOM.startswith(buf):
                more = read_block(stream, path, chunk_bytes)
                if not more:
                    break
                buf += more
            if buf.startswith(BOM):
                buf = buf[len(BOM):]
            first = False
        if not buf:
            if rest:
                yield _split(rest, next_line)
            return
        buf = rest + buf
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > limit:
                raise TraceError(path, f"line longer than {limit} bytes (no newline): not a "
                                 "text trace?", line=next_line)
            rest = buf
            continue
        rest = buf[cut + 1:]
        body = buf[: cut + 1]
        if len(rest) > limit:
            raise TraceError(path, f"line longer than {limit} bytes (no newline): not a "
                             "text trace?", line=next_line + body.count(b"\n"))
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
    if b"#" not in trimmed and not _has_blank_line(trimmed):
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


def _has_blank_line(data: bytes) -> bool:
    """Whether `data` has an empty or whitespace-only line: vectorised over the newlines
    (a regex over 16 MiB takes seconds); the regex only where some line starts with a
    blank."""
    if not data or data.endswith(b"\n"):
        return True
    a = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    if nl.size > 1 and bool((np.diff(nl) == 1).any()) or (nl.size and nl[0] == 0):
        return True
    first = a[np.concatenate(([0], nl + 1))]  # the first byte of every line
    if not bool(((first == 32) | (first == 9)).any()):
        return False
    return _BLANK_LINE.search(data) is not None


def first_data_line(path: Path) -> tuple[str | None, list[str]]:
    """The first non-comment line (stripped) and the comment lines before it (a UTF-8
    byte-order mark at the start is skipped; bad bytes are replaced, the parser names them)."""
    stream, raw = open_binary(path)
    comments: list[str] = []
    try:
        for chunk_lines in _head_lines(stream, path):
            for line in chunk_lines:
                s = line.decode("utf-8", "replace").strip()
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


def _head_lines(stream: BinaryIO, path: Path) -> Iterator[list[bytes]]:
    """The input's lines, a block at a time (a long run of comments is fine; one line longer
    than MIN_LINE_LIMIT is cut there, the chunked reader reports it)."""
    rest = b""
    first = True
    while True:
        buf = read_block(stream, path, 64 * 1024)
        if first:
            buf, first = buf[len(BOM):] if buf.startswith(BOM) else buf, False
        if not buf:
            if rest:
                yield [rest]
            return
        lines = (rest + buf).split(b"\n")
        rest = lines.pop()
        if len(rest) > MIN_LINE_LIMIT:
            lines.append(rest)
            rest = b""
        yield lines
