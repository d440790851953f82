"""The shared manifest corpus (tests/data/manifests/): one case a file, run through the
Python loader (test_trust_bundle.py) and the C runtime's (test_trust_runtime.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS = sorted((Path(__file__).parent / "data" / "manifests").glob("*.json"))


def apply_case(base: dict[str, Any], case: dict[str, Any]) -> str:
    """The manifest text of a corpus case (tests/data/manifests/README.md)."""
    if "manifest_text" in case:
        return case["manifest_text"]
    m = dict(base)
    patch = dict(case["manifest_patch"])
    for k in patch.pop("$delete", []):
        m.pop(k, None)
    raw = patch.pop("$raw", {})
    m.update(patch)
    for k in raw:
        m[k] = f"@RAW-{k}@"
    text = json.dumps(m, indent=1)
    for k, v in raw.items():
        text = text.replace(json.dumps(f"@RAW-{k}@"), v)
    return text
