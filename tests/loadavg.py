"""How much slower than on a quiet machine things run now: the one factor every hang guard
and budget in the tests stretches by (flashml.cores.load_factor, which the product's own
waits use too). Plain Python (no pytest): tests/adversarial.py also runs as a bare worker
script."""

from __future__ import annotations

from flashml.cores import load_factor

__all__ = ["load_factor"]
