"""An evaluation for people: the markdown section of docs/EVALUATION.md (:func:`render_markdown`
and its cells and bullets, which scripts/make_evaluation.py also reads for its summary table),
the plot (predicted vs measured; cost vs throughput with the picks) and the JSON file.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from srifty.evaluate.choice import Savings, Verdict
from srifty.evaluate.drift import RecordingDrift
from srifty.evaluate.results import Evaluation
from srifty.outputs import save_figure


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def baseline_cell(b: dict[str, Any]) -> str:
    """A baseline's config and regret (or why it has none) for the report."""
    if not b.get("config"):
        return "none within the constraints"
    return f"{b['config']}: " + (_pct(b["regret"]) if b["regret"] is not None else (b["note"] or "-"))


def _duration(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def savings_cell(x: Savings, b: dict[str, Any]) -> str:
    """The report's cell for the pick against one baseline (:func:`against_baseline`)."""
    if not b.get("config"):
        return f"{x.verdict.value}: none within the constraints"
    if b.get("regret") is None:
        return f"{x.verdict.value}: {b['config']} {b.get('note') or 'breaks the constraints'}"
    if x.job_cost_change is None or x.job_time_change is None:
        return x.verdict.value
    if x.job_cost_change == 0.0 and x.job_time_change == 0.0:
        return f"{x.verdict.value}: the same configuration"
    cost = f"{abs(x.job_cost_change) * 100:.0f}% {'cheaper' if x.job_cost_change < 0 else 'dearer'}"
    time = f"{1 + x.job_time_change:.2f}× the time"
    repaid = f"; profiling repaid after {_duration(x.payback_hours)} of training" if x.payback_hours is not None else ""
    return f"{x.verdict.value}: job {cost}, {time}{repaid}"


def pool_verdicts(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:meth:`Evaluation.baseline_verdicts` of several evaluations, summed."""
    per: dict[str, dict[str, int]] = {}
    for v in parts:
        for name, c in v["per_baseline"].items():
            acc = per.setdefault(name, {v.value: 0 for v in Verdict})
            for k in acc:
                acc[k] += c[k]
    keys = ("cases", "at_least_as_good_as_every_baseline", "better_than_every_baseline")
    return {"per_baseline": per, **{k: sum(v[k] for v in parts) for k in keys}}


def verdicts_line(v: dict[str, Any]) -> str:
    """The report's bullet on how the pick fares against the baselines across the cases."""
    per = "; ".join(f"{name}: " + ", ".join(f"{v.value} in {c[v.value]}" for v in Verdict)
                    for name, c in v["per_baseline"].items())
    return (f"- Against the baselines (by measured figures): srifty's pick is at least as good as every baseline in "
            f"{v['at_least_as_good_as_every_baseline']} of {v['cases']} cases and better than every one in "
            f"{v['better_than_every_baseline']} ({per}).")


def mixes_line(m: dict[str, int]) -> str:
    """The report's bullet on mixes of types: how often srifty picks one, how often one is the
    measured best, and a mixed pick against the best homogeneous configuration."""
    text = (f"- Mixes of types: srifty's pick is a mix in {m['pick_mixed']} of {m['cases']} cases, the measured best "
            f"in {m['oracle_mixed']}")
    if m["pick_mixed"]:
        text += (f"; against the best homogeneous configuration a mixed pick is better in "
                 f"{m['mix_better_than_homogeneous']}, the same in {m['mix_same_than_homogeneous']} and worse in "
                 f"{m['mix_worse_than_homogeneous']}")
    return text + "."


def drift_line(d: RecordingDrift) -> str:
    """The report's bullet on how far the oracle's own figures moved since an earlier recording."""
    return (f"- Repeatability of the oracle itself: against {d.previous}, the {d.configurations} configurations "
            f"measured in both moved by {_pct(d.multi_host_mape)} on average (multi-host; single hosts "
            f"{_pct(d.single_host_mape)}). Each earlier multi-host figure scaled by how its hosts changed alone "
            f"still misses today's by {_pct(d.replay_mape)} (MAPE over {d.replayed}, worst {_pct(d.replay_worst)}): "
            "what carrying the earlier recording over to this recording would get, against which to read the "
            "prediction error above; when the machine is unchanged, it is about the floor for a predictor built "
            "from single-host profiles.")


def render_markdown(ev: Evaluation, command: str, plot: str | None = None) -> str:
    s = ev.summary()
    lines = [
        f"## {ev.model} (per-worker batch {ev.batch_size})",
        "",
        f"Command: `{command}`",
        "",
        f"Space: {s['configurations']} configurations of {', '.join(ev.types)} (homogeneous and mixes of two "
        f"types, up to {ev.max_hosts} hosts, whose CPU shares fit this machine's cores, at the batch above on every "
        f"worker; and each mix srifty picked at its own batch split, run as its plan), every one measured. Each "
        f"case's pick is `srifty recommend`'s (the solver over the latency model's predictions, on demand, the "
        f"case's availability limits and the machine's cores as capacity limits). Latency model trained on "
        f"{', '.join(ev.predictor['trained_on']) or 'nothing'} (this model's own runs excluded).",
        "",
        f"- Prediction error over the {len(ev.prediction_errors)} predicted configurations (the single hosts were "
        f"measured while profiling): MAPE {_pct(s['prediction_mape'])}, "
        f"median {_pct(s['prediction_median_ape'])}, worst {_pct(s['prediction_max_ape'])}; the measured figure lies "
        f"inside the predicted 5–95% interval for {s['interval_hits']} of "
        f"{s['interval_checked']}.",
        *([f"- The oracle's own figures are not exact: each is the median iteration of a run cut at `--max-seconds`, "
           f"whose 95% CI is ±{_pct(s['oracle_median_rel_ci'])} (median over the predicted "
           f"configurations). {s['within_measurement_ci']} of {s['measurement_ci_checked']} predictions lie inside "
           "their measurement's CI, where an exact prediction would be about 95% of the time: the error above is "
           "mostly the model's where this share is low."]
          if s["oracle_median_rel_ci"] is not None else []),
        f"- Cheap profiling: {ev.profiling_seconds:.0f} s (${ev.profiling_usd:.4f} at catalog prices) against "
        f"{ev.oracle_seconds:.0f} s (${ev.oracle_usd:.4f}) to run every configuration: "
        f"{_pct(s['profiling_share_of_oracle'])} of the oracle's time (workers' wall time; hosts' set-up not counted).",
        "- The single-host configurations are measured by the profiling step itself (the oracle reuses those runs), "
        "so srifty knows them exactly; regret can only come from the multi-host configurations it predicts.",
        *([verdicts_line(s["against_baselines"]), mixes_line(s["mixes"])] if ev.cases else []),
        *([drift_line(ev.drift)] if ev.drift else []),
        "",
        "| constraints | srifty's pick | oracle | regret | " + " | ".join(
            ev.cases[0].baselines) + " |" if ev.cases else "",
        "|---|---|---|---|" + "---|" * (len(ev.cases[0].baselines) if ev.cases else 0),
    ]
    for r in ev.cases:
        cells = [r.case.label(), r.pick.config if r.pick else "-", r.oracle.config if r.oracle else "-",
                 _pct(r.pick_regret) if r.pick_regret is not None else (r.pick_note or "-")]
        for b in r.baselines.values():
            cells.append(baseline_cell(b))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Regret: throughput lost (objective throughput) or extra $/h paid (objective cost) against the "
              "oracle's pick, by measured figures.", ""]
    if ev.cases:
        lines += [f"Profiling cost against what srifty's pick saves: the same training job (a fixed number of samples) "
                  f"on the pick against each baseline, by measured figures, and how long the pick must train before "
                  f"its saving has paid for the cheap profiling (${ev.profiling_usd:.4f}); better / same / worse is "
                  f"the verdict on the case's objective.", "",
                  "| constraints | " + " | ".join(ev.cases[0].baselines) + " |",
                  "|---|" + "---|" * len(ev.cases[0].baselines)]
        for r, against in zip(ev.cases, ev.against_baselines()):
            cells = [savings_cell(against[n], b) for n, b in r.baselines.items()]
            lines.append("| " + " | ".join([r.case.label()] + cells) + " |")
        lines.append("")
    lines += ["| configuration | $/h | predicted samples/s | measured samples/s | error | source |",
              "|---|---:|---:|---:|---:|---|"]
    for c in sorted(ev.candidates, key=lambda c: -(c.measured_samples_per_s or 0)):
        lines.append(f"| {c.config} | {c.usd_per_hour:.2f} | {c.predicted_samples_per_s or 0:.1f} | "
                     f"{c.measured_samples_per_s or 0:.1f} | {_pct(c.prediction_error)} | {c.source or '-'} |")
    if plot:
        lines += ["", f"![predicted vs measured; cost vs throughput]({plot})"]
    return "\n".join(lines) + "\n"


def plot(ev: Evaluation, path: str) -> None:
    """Predicted vs measured throughput; $/h vs measured throughput with the picks marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = [c for c in ev.candidates if c.measured_samples_per_s and c.predicted_samples_per_s]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    meas = [c.measured_samples_per_s for c in cands]
    pred = [c.predicted_samples_per_s for c in cands]
    a.scatter(meas, pred, c=["tab:blue" if c.homogeneous else "tab:orange" for c in cands], s=22)
    hi = max(meas + pred) * 1.1
    a.plot([0, hi], [0, hi], "k--", lw=0.8)
    a.set_xlabel("measured samples/s")
    a.set_ylabel("predicted samples/s")
    a.set_title(f"{ev.model}: prediction (blue homogeneous, orange mixed)")
    b.scatter(meas, [c.usd_per_hour for c in cands], s=18, color="0.6")
    markers = ["*", "P", "X", "D", "s", "^"]
    for i, r in enumerate(ev.cases):
        color = f"C{i}"
        if r.oracle is not None and r.oracle.measured_samples_per_s:  # hollow ring: the oracle's choice
            b.scatter([r.oracle.measured_samples_per_s], [r.oracle.usd_per_hour], s=260, facecolors="none",
                      edgecolors=color, linewidths=1.5, label=f"case {i + 1} oracle: {r.oracle.config}")
        if r.pick is not None and r.pick.measured_samples_per_s:  # filled marker: srifty's pick
            b.scatter([r.pick.measured_samples_per_s], [r.pick.usd_per_hour], marker=markers[i % 6], s=80,
                      color=color, label=f"case {i + 1} srifty: {r.pick.config}")
        if r.case.budget_per_hour is not None:
            b.axhline(r.case.budget_per_hour, ls=":", lw=0.8, color="tab:red")
        if r.case.min_throughput is not None:
            b.axvline(r.case.min_throughput, ls=":", lw=0.8, color="tab:green")
    b.set_xlabel("measured samples/s")
    b.set_ylabel("$ per hour")
    b.set_title("cost vs throughput (dotted: constraints)")
    b.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def save_json(ev: Evaluation, path: str) -> None:
    from srifty.profile import atomic_write_text

    atomic_write_text(path, json.dumps(ev.to_dict(), indent=1) + "\n")
