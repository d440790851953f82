"""The measured-vs-simulated section of docs/how-to/mount-a-cache.md and its plot
(docs/assets/device_busy.png), rendered from the committed bench/results/device.json
(bench/bench_device.py). The section sits between the markers

    <!-- device.json: begin (bench/render_device_docs.py renders this) -->
    <!-- device.json: end -->

    .venv/bin/python bench/render_device_docs.py                  # print the section
    .venv/bin/python bench/render_device_docs.py --write --plot   # replace it, draw the plot
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import docs_sections  # noqa: E402

PAGE = REPO / "docs" / "how-to" / "mount-a-cache.md"
PLOT = REPO / "docs" / "assets" / "device_busy.png"
SCRIPT = "render_device_docs.py"


def device_section(r: dict[str, Any]) -> str:
    d = r["disk"]
    lines = [
        f"Probed device: seek {d['t_seek_s'] * 1e3:.2f} ms, bandwidth "
        f"{d['bandwidth_bytes_per_s'] / 2**20:.1f} MiB/s (throttle: "
        f"{r['throttle']['read_iops']} read IOPS, "
        f"{r['throttle']['read_bps'] / 2**20:g} MiB/s); {r['windows']} windows of "
        f"{r['window_trace_s'] / 3600:.2f} trace hours, each played back to back; flash "
        f"{r['flash_bytes'] / 2**20:g} MiB; load average {r['machine']['load_avg_1m']:.1f}.",
        "",
        "| policy | peak busy, measured (s) | peak DT, simulated (s) | peak error | "
        "Spearman over windows | backend IOs mount / sim |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, p in r["policies"].items():
        err = "n/a" if p["peak_rel_error"] is None else f"{p['peak_rel_error']:+.1%}"
        rho = "n/a" if p["spearman"] is None else f"{p['spearman']:.2f}"
        lines.append(f"| {name} | {p['peak_measured_s']:.2f} | {p['peak_simulated_s']:.2f} | "
                     f"{err} | {rho} | {p['mount']['backend_ios']} / "
                     f"{p['simulator']['backend_ios']} |")
    lines += ["", f"Ranking by peak, measured: {', '.join(r['ranking_measured'])}; simulated: "
              f"{', '.join(r['ranking_simulated'])} "
              f"({'the same' if r['ranking_equal'] else 'different'}).", "",
              "![measured device busy time vs simulated DT per window]"
              "(../assets/device_busy.png)"]
    eq = r.get("equal_write_rate")
    if eq:
        cal, ch = eq["calibration"], eq["bundle_peak_vs_rejectx"]
        lines += ["", "At near-equal flash writes: the demo bundle recompiled at the admission "
                  "threshold closest to RejectX's flash writes, "
                  f"{cal['threshold']:.4f}, where the simulator has it admit "
                  f"{cal['bundle_admitted_segments']} segments to RejectX's "
                  f"{cal['rejectx_admitted_segments']} on the trace RejectX's mount "
                  "recorded (load average "
                  f"{eq['load_avg']['rejectx']['before'][0]:.1f} and "
                  f"{eq['load_avg']['bundle']['before'][0]:.1f}):", "",
                  "| policy | flash written, mount (MiB) | peak busy, measured (s) | "
                  "peak DT, simulated (s) |", "|---|---:|---:|---:|"]
        for name, p in eq["policies"].items():
            lines.append(f"| {name} | {eq['flash_written_bytes'][name] / 2**20:.0f} | "
                         f"{p['peak_measured_s']:.2f} | {p['peak_simulated_s']:.2f} |")
        lines += ["", "The bundle's peak busy time vs RejectX's: measured "
                  f"{ch['measured']:+.1%}, simulated {ch['simulated']:+.1%}."]
    apps = r.get("applications")
    if apps:
        lines += ["", "Applications through the mount (measured only):", "",
                  "| workload | policy | device busy (s) | wall (s) | backend IOs | hits / "
                  "reads | result |", "|---|---|---:|---:|---:|---:|---|"]
        for job, per in apps.items():
            for name, a in per.items():
                if "error" in a:
                    lines.append(f"| {job} | {name} | | | | | failed: "
                                 f"{a['error'][:120].replace('|', '/')} |")
                    continue
                m = a["mount"]
                res = (f"{a['fio']['iops']:.0f} IOPS, p99 {a['fio']['clat_p99_us']:.0f} µs"
                       if "fio" in a else f"{a['db_bench']['ops_per_s']:.0f} ops/s")
                lines.append(f"| {job} | {name} | {a['busy_s']:.2f} | {a['wall_s']:.2f} | "
                             f"{m['backend_ios']} | {m['hits']} / {m['accesses']} | {res} |")
    return "\n".join(lines)


def plot(r: dict[str, Any], out: Path = PLOT) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (name, p) in enumerate(r["policies"].items()):
        c = f"C{i}"
        x = range(len(p["measured_busy_s"]))
        ax.plot(x, p["measured_busy_s"], "-o", color=c, label=f"{name}: measured busy")
        ax.plot(x, p["simulated_dt_s"], "--", color=c, label=f"{name}: simulated DT")
    ax.set_xlabel("window")
    ax.set_ylabel("seconds")
    ax.set_title("Device busy time (io_ticks) vs the simulator's DT")
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


SECTIONS = {"device": device_section}


if __name__ == "__main__":
    if "--plot" in sys.argv:
        plot(json.loads((REPO / "bench" / "results" / "device.json").read_text()))
    sys.exit(docs_sections.main([a for a in sys.argv[1:] if a != "--plot"], PAGE, SCRIPT,
                                SECTIONS))
