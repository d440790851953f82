"""The main job's policy table, TCO and plots (PNG, matplotlib without a display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flashml.policies.tco import tco

#: Policies of the main job, in report order.
POLICIES = ("rejectx", "coinflip", "cachelib_ml", "baleen_admission_only",
            "baleen_flat_threshold", "baleen", "opt")


def add_tco(policies: dict[str, dict[str, Any]], peak0: float, wr0_mbps: float) -> None:
    """TCO of every policy relative to RejectX's peak DT `peak0` at the default write rate
    `wr0_mbps` (Baleen eq. 4b)."""
    for m in policies.values():
        m["tco"] = tco(m["peak_dt_util"], m["flash_write_rate_mbps"], peak0, wr0_mbps)


def table(policies: dict[str, dict[str, Any]], baseline: str = "rejectx") -> str:
    base = policies[baseline]["peak_dt_util"]
    # peak and mean DT count GETs (the artifact's PeakServiceTimeUtil1); the write rate in
    # MB/s (10^6 B/s, flashml's unit for targets) and MiB/s (the artifact's)
    head = (f"{'policy':24} {'peak DT':>8} {'vs RejectX':>10} {'mean DT':>8} {'MB/s':>7} "
            f"{'MiB/s':>7} {'IO hit':>7} {'TCO':>7}")
    lines = [head, "-" * len(head)]
    for name, m in policies.items():
        red = 1 - m["peak_dt_util"] / base if base > 0 else float("nan")
        mib = m.get("flash_write_rate_mibps", m["flash_write_rate_mbps"] * 1e6 / 2**20)
        lines.append(f"{name:24} {m['peak_dt_util']:8.4f} {red:+10.1%} {m['mean_dt_util']:8.4f} "
                     f"{m['flash_write_rate_mbps']:7.2f} {mib:7.2f} {m['io_hit_ratio']:7.3f} "
                     f"{m.get('tco', float('nan')):7.3f}")
    return "\n".join(lines)


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out: Path, **kw: Any) -> Path:
    """`fig` as `out` (its format from the suffix), written under a temporary name and
    renamed (files.atomic_path): a plot in a run folder is never half written, nor
    rewritten in place."""
    from flashml.files import atomic_path

    out = Path(out)
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, format=out.suffix.lstrip(".") or None, **kw)
    return out


def plot_write_rate_vs_peak(points: dict[str, list[tuple[float, float]]], out: Path) -> Path:
    """Peak DT against write rate: one marker per policy, a line for a sweep. Policies often
    share a point (every one is tuned to the same write rate), so each has its own marker
    shape, the earlier ones drawn larger and hollow ones on top, and the sweep's line sits
    underneath: no dot hides another."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.5), dpi=110)
    shapes = "osD^vPX<>ph*"
    singles = [(n, p) for n, p in points.items() if len(p) == 1]
    for name, pts in points.items():
        if len(pts) > 1:
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", marker=".", ms=9,
                    color="0.55", zorder=1, label=name)
    for k, (name, pts) in enumerate(singles):
        x, y = pts[0]
        ax.plot([x], [y], shapes[k % len(shapes)], ms=13 - 6 * k / max(1, len(singles) - 1),
                mfc="none", mew=1.6, zorder=2 + k, label=name)
    ax.set_xlabel("flash write rate (MB/s, full node)")
    ax.set_ylabel("peak DT utilisation")
    ax.set_title("Write rate vs peak disk-head time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_tco_curve(curve: list[tuple[float, float]], chosen: float, out: Path,
                   bounds: tuple[float, float] | None = None) -> Path:
    """TCO against the measured write rate of each complete trial, the chosen point
    starred; `bounds`: the target write rates the sweep searched (dashed lines)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    pts = sorted(curve)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="Baleen")
    best = min(pts, key=lambda p: abs(p[0] - chosen))
    ax.plot([best[0]], [best[1]], "r*", ms=14, label=f"chosen {chosen:.1f} MB/s")
    if bounds is not None and all(b is not None for b in bounds):
        for i, b in enumerate(bounds):
            ax.axvline(b, color="tab:gray", ls="--", lw=1,
                       label=f"searched {bounds[0]:.3g}-{bounds[1]:.3g} MB/s" if i == 0
                       else None)
    ax.set_xlabel("flash write rate (MB/s)")
    ax.set_ylabel("TCO (relative to RejectX at the default rate)")
    ax.set_title("Baleen-TCO")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_peak_schedule(profile_s: list[float], hours: tuple[int, ...], bonus: float,
                       out: Path, days: float = 1.0) -> Path:
    """The training window's no-cache disk-head time by hour of the day, in seconds per hour
    (`profile_s`, summed over the window, divided by its `days`, at least one), the peak hours
    (where the admission threshold is `bonus` lower) highlighted."""
    plt = _plt()
    per_hour = [v / max(days, 1.0) for v in profile_s]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    colors = ["tab:red" if h in hours else "tab:gray" for h in range(24)]
    ax.bar(range(24), per_hour, color=colors)
    ax.set_xticks(range(0, 24, 2))
    ax.set_xlabel("hour of the day (UTC)")
    ax.set_ylabel("no-cache disk-head time (s per hour)")
    span = f"mean of {days:g} training days" if days > 1.0 else "training window"
    ax.set_title((f"Peak schedule: threshold -{bonus:g} in the red hours" if hours
                  else "Peak schedule: none (flat threshold)") + f" ({span})", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_feature_importance(names: list[str], gains: list[float], out: Path) -> Path:
    plt = _plt()
    order = sorted(range(len(names)), key=lambda i: gains[i])
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    ax.barh([names[i] for i in order], [gains[i] for i in order])
    ax.set_xlabel("total gain")
    ax.set_title("Admission model feature importance")
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_dt_utilisation(series_by_policy: dict[str, dict[str, Any]], out: Path,
                        title: str = "Disk-head time utilisation") -> Path:
    """DT utilisation per window over time, one line per policy, each peak marked by a dot
    in the line's colour; the peaks' values and times are in the legend (outside the axes),
    not written beside the dots, where they overlapped."""
    import numpy as np

    plt = _plt()

    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=110)
    for name, s in series_by_policy.items():
        t = np.asarray(s["time"], dtype=float)
        u = np.asarray(s["dt_util"], dtype=float)
        warm = np.asarray(s.get("warmup", np.zeros(len(t), bool)), dtype=bool)
        hours = (t - t[0]) / 3600.0 if len(t) else t
        (line,) = ax.plot(hours, u, lw=1, label=name)
        if (~warm).any():
            i = int(np.argmax(np.where(warm, -np.inf, u)))
            ax.plot(hours[i], u[i], "o", color=line.get_color(), mec="black", mew=0.6,
                    zorder=5)
            line.set_label(f"{name}: peak {u[i]:.3f} at h {hours[i]:.1f}")
        if warm.any():
            ax.axvspan(hours[0], hours[warm].max(), color="0.9", zorder=0)
    ax.set_xlabel("hours since trace start (grey: warm-up, excluded from peak)")
    ax.set_ylabel("DT utilisation")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_miss_ratio_curves(curves: dict[str, list[tuple[float, float]]], out: Path,
                           xlabel: str = "cache size", ylabel: str = "miss ratio") -> Path:
    """Miss ratio (or `ylabel`'s) against cache size, one line per policy (log-scaled
    sizes)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for name, pts in curves.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                lw=2.2 if name == "mat" else 1.0, label=name)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel[0].upper()}{ylabel[1:]} vs cache size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out)
    plt.close(fig)
    return out
