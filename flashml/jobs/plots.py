"""Plots people would rather look at than read (PNG, matplotlib without a display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_dt_utilisation(series_by_policy: dict[str, dict[str, Any]], out: Path,
                        title: str = "Disk-head time utilisation") -> Path:
    """DT utilisation per window over time, one line per policy, each peak marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    for k, (name, s) in enumerate(series_by_policy.items()):
        t = np.asarray(s["time"], dtype=float)
        u = np.asarray(s["dt_util"], dtype=float)
        warm = np.asarray(s.get("warmup", np.zeros(len(t), bool)), dtype=bool)
        hours = (t - t[0]) / 3600.0 if len(t) else t
        (line,) = ax.plot(hours, u, lw=1, label=name)
        if (~warm).any():
            i = int(np.argmax(np.where(warm, -np.inf, u)))
            ax.plot(hours[i], u[i], "o", color=line.get_color())
            ax.annotate(f"peak {u[i]:.3f}", (hours[i], u[i]), textcoords="offset points",
                        xytext=(6, 4 + 11 * k), fontsize=8, color=line.get_color())
        if warm.any():
            ax.axvspan(hours[0], hours[warm].max(), color="0.9", zorder=0)
    ax.set_xlabel("hours since trace start (grey: warm-up, excluded from peak)")
    ax.set_ylabel("DT utilisation")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
