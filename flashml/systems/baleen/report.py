"""Baleen's summary: the policies' headline figures at the target write rate, the notes on
them and the text `flashml pipeline run` prints (`describe`)."""

from __future__ import annotations

from typing import Any

from flashml.jobs import report
from flashml.jobs.run import finite_numbers
from flashml.settings import BaleenSettings


def headlines_of(pol: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's `headline.*` metrics (flashml/jobs/ship.py): Baleen's peak DT, its cut vs
    RejectX, its gap to OPT and its write rate."""
    b = pol.get("baleen", {})
    out = {"peak_dt_util": b.get("peak_dt_util"),
           "write_rate_mbps": b.get("flash_write_rate_mbps")}
    if {"baleen", "rejectx", "opt"} <= set(pol):
        out["peak_dt_cut"] = 1 - b["peak_dt_util"] / pol["rejectx"]["peak_dt_util"]
        out["gap_to_opt"] = b["peak_dt_util"] / pol["opt"]["peak_dt_util"] - 1
    return out


#: Per policy, the parent run's metrics `<policy>_<metric>` (the headline of the table).
HEADLINE = ("peak_dt_util", "flash_write_rate_mbps", "tco")


def headline_metrics(pol: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The parent run's headline metrics: every policy's peak DT, write rate and TCO, and
    Baleen's peak-DT reduction vs RejectX and gap to OPT (as in summary.json)."""
    out = {f"{name}_{k}": m[k] for name, m in pol.items() for k in HEADLINE if k in m}
    if {"baleen", "rejectx", "opt"} <= set(pol):
        out["baleen_vs_rejectx_peak_reduction"] = \
            1 - pol["baleen"]["peak_dt_util"] / pol["rejectx"]["peak_dt_util"]
        out["gap_to_opt"] = pol["baleen"]["peak_dt_util"] / pol["opt"]["peak_dt_util"] - 1
    return finite_numbers(out)


def summary(records: dict[str, dict[str, Any]], s: BaleenSettings) -> dict[str, Any]:
    """The job's summary.json from its stage records."""
    pol = records["policies"]["policies"]
    trained = records["train"]
    out: dict[str, Any] = {k: v for k, v in records["ingest"].items() if k != "trace"}
    out |= {
        "policies": pol,
        "target_write_rate_mbps": s.target_write_rate_mbps,
        "cache_gb": s.cache_gb,
        "eviction_age_s": trained["eviction_age_s"],
        "convergence": trained["convergence"],
        "choice": trained.get("choice"),
        "episodes": records["episodes"]["summary"],
        "baleen_vs_rejectx_peak_reduction":
            1 - pol["baleen"]["peak_dt_util"] / pol["rejectx"]["peak_dt_util"],
        "gap_to_opt": pol["baleen"]["peak_dt_util"] / pol["opt"]["peak_dt_util"] - 1,
    }
    out |= records["sweep"]
    out["plots"] = records["plots"]["plots"]
    out["policy_bundle"] = trained.get("policy_bundle")
    out["mlflow_run_id"] = trained["mlflow_run_id"]
    if "skipped" not in records["evaluate"]:
        out["registry"] = records["evaluate"]
    if "skipped" not in records["compile"]:
        out["compiled"] = records["compile"]
    return out


def describe(summary: dict[str, Any], s: BaleenSettings) -> str:
    """What `flashml pipeline run` prints at the end: the policy table and the headline."""
    return "\n".join([
        "", report.table(summary["policies"]),
        _notes(summary["policies"], s.target_write_rate_mbps),
        *([f"\nshipped variant (chosen on held-out data of the training window): "
           f"{summary['choice']['reason']}"] if summary.get("choice") else []),
        f"\nBaleen vs RejectX peak DT: {summary['baleen_vs_rejectx_peak_reduction']:+.1%} "
        f"reduction; gap to OPT {summary['gap_to_opt']:+.1%}; TCO-chosen write rate "
        f"{summary['chosen_write_rate_mbps']:.1f} MB/s"])


def _notes(policies: dict[str, dict[str, Any]], target: float) -> str:
    """What to tell the user when policies cannot be tuned to the target write rate."""
    tuned = {k: v for k, v in policies.items() if k != "opt"}
    short = {k: v["flash_write_rate_mbps"] for k, v in tuned.items()
             if v.get("reached_target") is False}
    if short and len(short) == len(tuned) and max(short.values()) < target:
        top = max(short.values())
        return (f"\nnote: no policy reaches the target write rate {target:g} MB/s on this "
                f"trace (at most {top:.3g} MB/s): the write budget does not bind, so the "
                f"policies differ little; try --target-write-rate below {top:.3g} or a "
                f"smaller --cache-gb")
    if short:
        return (f"\nnote: {', '.join(short)} cannot be tuned to within 5% of the target "
                f"write rate {target:g} MB/s on this trace; they run at "
                + ", ".join(f"{v:.3g}" for v in short.values()) + " MB/s")
    return ""
