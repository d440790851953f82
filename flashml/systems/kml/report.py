"""`flashml kml run`'s summary: every workload's fixed baselines and tuners with their
ratios, the headlines, and its text (`describe`)."""

from __future__ import annotations

from typing import Any

from flashml.systems.kml.settings import LINUX_KIB, TUNERS, KmlSettings


def summary(records: dict[str, dict[str, Any]], s: KmlSettings) -> dict[str, Any]:
    sw, tr, comp, ev = (records[k] for k in ("sweep", "train", "compile", "evaluate"))
    return {"mode": sw["mode"], "twin_because": sw["twin_because"],
            "default_kib": sw["default_kib"], "linux_kib": LINUX_KIB,
            "backend": s.backend if sw["mode"] == "real" else None,
            "throttle": {"read_iops": s.read_iops, "read_mbps": s.read_mbps}
            if s.read_iops else None,
            "repeats": sw["repeats"], "duration_s": s.duration_s,
            "network": s.network, "shipped": ev["shipped"], "workloads": ev["workloads"],
            "sweep": sw["ops_per_s"], "sweep_runs": sw["runs"], "tied_kib": sw["tied_kib"],
            "label_kib": sw["label_kib"], "classes_kib": tr["classes_kib"],
            "models": {f"kml_{kind}": {**{k: v for k, v in m.items() if k != "bundle"},
                                       **comp[f"kml_{kind}"]}
                       for kind, m in tr["models"].items()},
            "tuner_mean_inference_ns": ev["tuner_mean_inference_ns"],
            "plots": records["plots"]["plots"]}


def describe(summary: dict[str, Any], s: KmlSettings) -> str:
    lines = [f"KML ({summary['mode']}; the device's default readahead "
             f"{summary['default_kib']} KiB; means of {summary['repeats']} run(s)), ops/s; "
             "each tuner's ratio to the best fixed size and to Linux's 128 KiB (95% interval):"]
    lines.append(f"  {'workload':22} {'default':>9} {'128 KiB':>9} {'best fixed':>14} "
                 + " ".join(f"{t:>32}" for t in TUNERS))
    for w, r in summary["workloads"].items():
        pol, rat = r["policies"], r["ratios"]
        cells = []
        for t in TUNERS:
            b, lx = rat[t]["best_fixed"], rat[t]["linux_128"]
            cells.append(f"{pol[t]['mean']:8.0f} {b['ratio']:5.2f} [{b['lo']:4.2f}-"
                         f"{b['hi']:4.2f}] {lx['ratio']:5.2f}x")
        lines.append(f"  {w + ('' if r['trained_on'] else ' *'):22} "
                     f"{pol['default']['mean']:9.0f} {pol['linux_128']['mean']:9.0f} "
                     f"{pol['best_fixed']['mean']:9.0f} ({r['best_fixed_kib']:>4}) "
                     + " ".join(f"{c:>32}" for c in cells))
    lines.append(f"  (* held out; shipped: {summary['shipped']})")
    for name, m in summary["models"].items():
        lines.append(f"  {name}: {int(m['cv_folds'])}-fold accuracy (workload / readahead "
                     f"size) {m['cv_accuracy']:.1%} / {m['cv_size_accuracy']:.1%}, "
                     f"{m['model_bytes']} B")
    return "\n".join(lines)


#: The registry judges a candidate by the shipped tuner's mean ops/s gain over Linux's
#: default readahead (128 KiB: the same baseline on every device).
SCORE = ("ops_gain", "max")


def headlines(summary: dict[str, Any], s: KmlSettings) -> dict[str, Any]:
    """Means over the workloads: the shipped tuner's ops/s vs Linux's 128 KiB (gain) and vs
    the best fixed size; its network's cross-validated accuracy."""
    w = list(summary["workloads"].values())
    return {"ops_gain": sum(r["kml_vs_linux_128"] for r in w) / len(w) - 1 if w else None,
            "vs_best_fixed": sum(r["kml_vs_best_fixed"] for r in w) / len(w) if w else None,
            "cv_accuracy": summary["models"][summary["shipped"]].get("cv_accuracy")}
