"""Baleen's TCO model (eq. 4b), relative to RejectX at the default write rate.

    TCO = PeakDT / PeakDT_0 + (1/36) * (170/281) * WR / WR_0

The first term is the HDD cost (disks needed at peak), the second the flash wear cost: one
36-HDD node's flash costs 170/281 of an HDD-equivalent per unit of write rate, relative to
the baseline's write rate WR_0.
"""

from __future__ import annotations

from flashml.config import DEFAULTS

FLASH_COST_PER_HDD = 170 / 281


def tco(peak_dt: float, write_rate_mbps: float, peak_dt0: float, write_rate0_mbps: float,
        disks: int = DEFAULTS.disks) -> float:
    if peak_dt0 <= 0 or write_rate0_mbps <= 0:
        raise ValueError("TCO baseline peak DT and write rate must be > 0")
    return peak_dt / peak_dt0 + (1 / disks) * FLASH_COST_PER_HDD * write_rate_mbps \
        / write_rate0_mbps
