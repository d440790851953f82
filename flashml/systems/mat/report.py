"""`flashml mat run`'s summary: every policy's miss ratios per capacity against LRU, the
headlines, the plots' curves and its text (`describe`)."""

from __future__ import annotations

from typing import Any

from flashml.systems.mat.settings import MatSettings, objective_key, size_exponent


def miss_ratio_curves(per_capacity: dict[str, Any], metric: str
                      ) -> dict[str, list[tuple[float, float]]]:
    """{policy: [(capacity, metric)]} for the plots; a policy that has no figure for the
    metric (libCacheSim's byte miss ratio when the cache counts objects) has no point."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in per_capacity.values():
        for p, m in r["policies"].items():
            if m.get(metric) is not None:
                curves.setdefault(p, []).append((float(r["capacity"]), float(m[metric])))
    return curves


def summary(records: dict[str, dict[str, Any]], s: MatSettings) -> dict[str, Any]:
    res = records["evaluate"]["per_capacity"]
    names = list(res)
    middle = names[len(names) // 2]
    out: dict[str, Any] = {k: v for k, v in records["ingest"].items()}
    out |= {"per_capacity": res, "policies": res[middle]["policies"],
            "middle_capacity": middle, "samples": records["samples"]["per_capacity"],
            "models": records["train"]["per_capacity"], "plots": records["plots"]["plots"]}
    out["compiled"] = records["compile"]["shipped"]
    out["tuned"] = records["tune"]["per_capacity"]
    out["periodic_window_requests"] = records["periodic"].get("window_requests")
    out["objective"] = {"name": s.objective, "metric": objective_key(s),
                        "size_exponent": size_exponent(s, {"unit": "bytes"})}
    return out


def _vs_lru(m: dict[str, Any], lru: dict[str, Any], metric: str, vs: str = "") -> str:
    """'0.4321 (+1.2%)' for the summary's lines; 'n/a' where the policy has no figure."""
    if m.get(metric) is None:
        return "n/a"
    return f"{m[metric]:.4f} ({m[metric] / lru[metric] - 1:+.1%}{vs})"


def describe(summary: dict[str, Any], s: MatSettings) -> str:
    """Per capacity every policy's byte miss ratio and miss ratio (sorted by the objective's,
    each against LRU's), predictions and time per eviction where it predicts."""
    key = objective_key(s)
    lines = [f"objective: {s.objective} ({key.replace('_', ' ')}; policies sorted by it)"]
    for name, r in summary["per_capacity"].items():
        lines.append(f"\ncapacity {name} ({r['capacity']} {r['unit']}):")
        lru = r["policies"]["lru"]
        # a policy without the figure (libCacheSim's byte miss ratio of an object-counted
        # cache is None) sorts last and reads n/a
        for p, m in sorted(r["policies"].items(),
                           key=lambda kv: (kv[1][key] is None, kv[1][key] or 0.0)):
            ppe = m.get("predictions_per_eviction")
            extra = (f"  {ppe:.2f} predictions/eviction, {m['ns_per_eviction']:.0f} ns"
                     if ppe and m.get("ns_per_eviction") is not None else "")
            lines.append(f"  {p:12} byte miss ratio {_vs_lru(m, lru, 'byte_miss_ratio', ' vs LRU')}"
                         f"  miss ratio {_vs_lru(m, lru, 'miss_ratio')}" + extra)
        if "periodic" in r:
            pr = r["periodic"]
            lines.append(f"  periodic retraining ({len(pr['windows'])} windows judged by the "
                         f"model of the window before): MAT byte miss ratio "
                         f"{pr['mat_byte_miss_ratio']:.4f} vs LRU {pr['lru_byte_miss_ratio']:.4f}"
                         f", miss ratio {pr['mat_miss_ratio']:.4f} vs LRU "
                         f"{pr['lru_miss_ratio']:.4f}, "
                         f"{pr['predictions_per_eviction']:.2f} predictions/eviction")
    return "\n".join(lines)


#: The registry judges a candidate by the miss ratio of its objective (byte miss ratio by
#: default, `--objective`) at the shipped (middle) capacity; `judged_on` names the objective.
SCORE = ("objective_miss_ratio", "min")


def headlines(summary: dict[str, Any], s: MatSettings) -> dict[str, Any]:
    """At the middle capacity (the shipped policy's): MAT's byte miss ratio and miss ratio,
    each one's cut vs LRU, the objective's (the registry's score) and its predictions per
    eviction."""
    pol = summary["policies"]
    mat, lru = pol["mat"], pol.get("lru", {})
    out: dict[str, Any] = {"objective_miss_ratio": mat[objective_key(s)]}
    for key in ("byte_miss_ratio", "miss_ratio"):
        base = lru.get(key)
        out[key] = mat[key]
        out[f"{key}_cut"] = 1 - mat[key] / base if base else None
    out["predictions_per_eviction"] = mat.get("predictions_per_eviction")
    return out
