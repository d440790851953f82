"""The policy compiler's files (the header, the wrapper templates) and a compiled bundle's file
names and format."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = HERE / "flashml_policy.h"
WRAPPER = HERE / "policy_wrapper.c.in"
PARTITION_WRAPPER = HERE / "partition_wrapper.c.in"
PARTITION_RULE = HERE / "partition_rule.c.in"
SO_NAME = "policy.so"
HEADER_NAME = "flashml_policy.h"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "flashml-policy-bundle/1"
