"""The one schema of a policy bundle's manifest.json (compiler/manifest.schema.json, JSON
Schema draft 2020-12) and the checks every loader runs with it.

    m = parse_manifest(raw_bytes, where="out/policy/manifest.json")   # UserError if bad
    check_knobs(params, where="models/policy.json")                   # compile's inputs

Beyond the schema, every number anywhere in a manifest must be finite (JSON has no NaN, but
`1e999` reads as infinity and Python's reader takes `NaN`/`Infinity`). A refusal names the
file and the field: `<dir>/manifest.json: field 'admit_threshold': expected a finite number
in [0, 1], got '0.5'`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flashml.errors import UserError

SCHEMA_PATH = Path(__file__).resolve().parent / "manifest.schema.json"
#: The format string of every bundle (compiled, or Pannier's knobs-only one).
FORMAT = "flashml-policy-bundle/1"
#: The largest manifest.json a loader reads.
MAX_MANIFEST_BYTES = 1 << 20
#: What each system's bundle must be able to do (the manifest's `capabilities`).
SYSTEM_CAPABILITY = {"baleen": "admission", "mat": "eviction", "mlcache": "partition",
                     "kml": "readahead", "pannier": None}


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def _validator(ref: str | None = None) -> Any:
    import jsonschema

    s = schema()
    cls = jsonschema.validators.validator_for(s)
    if ref is None:
        return cls(s)
    sub = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": ref}
    return cls(sub)


def _shown(v: Any) -> str:
    if isinstance(v, str):
        text = repr(v)
    else:
        try:
            text = json.dumps(v, allow_nan=True)
        except (TypeError, ValueError):
            text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _field(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _nonfinite(v: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], float] | None:
    """The path and value of the first non-finite number in v (depth-first), else None."""
    stack: list[tuple[tuple[Any, ...], Any]] = [(path, v)]
    while stack:
        p, x = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return p, x
        if isinstance(x, dict):
            stack.extend((p + (k,), y) for k, y in reversed(list(x.items())))
        elif isinstance(x, list):
            stack.extend((p + (i,), y) for i, y in reversed(list(enumerate(x))))
    return None


def _message(where: str, error: Any) -> str:
    """One line naming the file and the field of a jsonschema error."""
    # the innermost error says the most (a oneOf/if-then: its deepest cause)
    best = error
    while best.context:
        best = min(best.context, key=lambda e: (-len(e.absolute_path), str(e.message)))
    path = list(best.absolute_path)
    if best.validator == "required":
        missing = best.message.split("'")[1] if "'" in best.message else best.message
        return f"{where}: field '{_field([*path, missing])}': missing"
    if best.validator == "not" and "required" in (best.validator_value or {}):
        names = best.validator_value["required"]
        return (f"{where}: field '{_field([*path, names[0]])}': not allowed in a knobs-only "
                f"bundle (capabilities [])")
    expected = best.schema.get("x-expected") if isinstance(best.schema, dict) else None
    if best.validator == "uniqueItems":
        return f"{where}: field '{_field(path)}': duplicate entries in {_shown(best.instance)}"
    if expected is None:
        expected = best.message
    name = _field(path) or "(top level)"
    return f"{where}: field '{name}': expected {expected}, got {_shown(best.instance)}"


def validate(m: Any, where: str, ref: str | None = None) -> None:
    """Check a parsed manifest (or, with `ref`, a part of one: '#/$defs/knobs') against the
    schema; UserError naming `where` and the field."""
    bad = _nonfinite(m)
    if bad is not None:
        p, x = bad
        return _raise(f"{where}: field '{_field(p)}': expected a finite number, got {x!r}")
    errors = sorted(_validator(ref).iter_errors(m),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        _raise(_message(where, errors[0]))


def _raise(msg: str) -> None:
    raise UserError(msg)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """manifest.json's bytes -> the checked manifest (UserError naming `where` and the
    field)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise UserError(f"{where}: {len(data)} bytes; a manifest has at most "
                        f"{MAX_MANIFEST_BYTES} bytes")
    try:
        m = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e})") from None
    except ValueError as e:  # NaN, Infinity, -Infinity
        raise UserError(f"{where}: not valid JSON ({e})") from None
    except RecursionError:  # json.loads recurses once per nesting level
        raise UserError(f"{where}: not a policy manifest (JSON nested too deeply)") from None
    if not isinstance(m, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(m).__name__}")
    validate(m, where)
    return m


def check_knobs(params: Mapping[str, Any], where: str) -> None:
    """The admission knobs `flashml compile` reads from policy.json (eviction_age_s,
    target_write_rate_mbps, admit_threshold, when_threshold, peak_hours, peak_bonus) and
    the eviction/partition groups, checked by the manifest's own schema: the compiler
    refuses what every loader would refuse."""
    validate(dict(params), where, "#/$defs/knobs")
    for key, ref in (("eviction", "#/$defs/eviction"), ("partition", "#/$defs/partition"),
                     ("readahead", "#/$defs/readahead")):
        if isinstance(params.get(key), dict):
            try:
                validate(params[key], where, ref)
            except UserError as e:  # name the field inside its group
                text = str(e)
                prefix = f"{where}: field '"
                if text.startswith(prefix):
                    text = f"{prefix}{key}.{text[len(prefix):]}"
                raise UserError(text) from None
