"""The accuracy report as text and figure: the Markdown page of docs/ACCURACY.md's splits
(:func:`render_markdown`, with its per-regime and per-node tables and noise-floor paragraphs),
the predicted-against-measured plot (:func:`write_plot`), and the README's one-line summary
between its marker lines (:func:`render_readme_summary`, :func:`replace_readme_summary`).

Rendering only: it reads a :class:`ValidationReport` (srifty.validate.results) and computes
nothing the report does not hold.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Sequence

from srifty.errors import SriftyError
from srifty.model import BIN_MIN_HALF_WIDTH
from srifty.outputs import save_figure
from srifty.validate.results import (METHODS, TARGET_INSIDE, TARGET_MAPE, TARGET_MIN_ROWS, ReplicateFloor,
                                     ValidationReport, coverage_verdict)


def render_breakdown(title: str, table: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A Markdown table of :meth:`ValidationReport.breakdown`'s cells."""
    lines = ["", title, "", "| split | rows of | rows | model MAPE % | signed % (median) | best baseline MAPE % | "
             "inside the model's 5–95% interval % | its width, high/low (median) | "
             f"within ±{BIN_MIN_HALF_WIDTH:.2f} in log of the prediction % |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for split, cells in table.items():
        for c in cells:
            lines.append(f"| {split} | {c['group']} | {c['rows']} | {c['model_mape']:.1f} | "
                         f"{c['model_signed_median']:+.1f} | {c['baseline_mape']:.1f} ({c['baseline']}) | "
                         f"{c['inside_interval'] * 100:.0f} | {format_ratio(c.get('interval_ratio'))} | "
                         f"{c['inside_least'] * 100:.0f} |")
    return lines


def render_fold_nodes(cells: Sequence[dict[str, Any]]) -> list[str]:
    """A Markdown table of :meth:`ValidationReport.by_fold_and_nodes`'s cells of at least
    TARGET_MIN_ROWS rows."""
    kept = [c for c in cells if c["rows"] >= TARGET_MIN_ROWS]
    lines = ["", f"By fold and node count: each fold's held-out rows by the nodes they ran on, where the fold has at "
             f"least {TARGET_MIN_ROWS} of them ({len(cells) - len(kept)} smaller cells left out). The signed error "
             "is the median of predicted over measured, less 1: negative is too fast.", "", FOLD_COLUMNS, FOLD_RULE]
    return lines + [_fold_row(c) for c in kept]


FOLD_COLUMNS = ("| split | fold | rows of | rows | model MAPE % | signed % (median) | inside % | "
                "width, high/low (median) |")
FOLD_RULE = "|---|---|---|---:|---:|---:|---:|---:|"


def _fold_row(c: dict[str, Any]) -> str:
    """A fold's cell (:meth:`ValidationReport.by_fold_and_regime` or ``by_fold_and_nodes``) as the
    FOLD_COLUMNS of a Markdown row."""
    return (f"| {c['split']} | {c['fold']} | {c['group']} | {c['rows']} | {c['model_mape']:.1f} | "
            f"{c['model_signed_median']:+.1f} | {c['inside_interval'] * 100:.0f} | "
            f"{format_ratio(c.get('interval_ratio'))} |")


def render_fold_regimes(cells: Sequence[dict[str, Any]]) -> list[str]:
    """A Markdown table of :meth:`ValidationReport.by_fold_and_regime`'s cells of at least
    TARGET_MIN_ROWS rows, with whether each meets the MAPE target, and a sentence that counts them."""
    kept = [c for c in cells if c["rows"] >= TARGET_MIN_ROWS]
    lines = ["", f"By fold and regime: each fold's held-out rows by regime, where the fold has at least "
             f"{TARGET_MIN_ROWS} of them ({len(cells) - len(kept)} smaller cells left out), against the target "
             f"of a MAPE of at most {TARGET_MAPE:.0f}% in every such cell. The signed error is the median of "
             "predicted over measured, less 1: negative is too fast. Coverage is held to its target per split "
             "(the table by regime above): a model never seen is one draw of the folds, and the interval is as "
             "wide as the furthest miss of a model held out of the fit.", "",
             FOLD_COLUMNS + " meets the MAPE target? |", FOLD_RULE + "---|"]
    lines += [_fold_row(c) + f" {'yes' if c['meets_mape_target'] else 'no'} |" for c in kept]
    short = sum(1 for c in kept if not c["meets_mape_target"])
    lines += ["", f"{len(kept) - short} of the {len(kept)} cells meet the MAPE target."]
    return lines


def render_coverage_verdicts(by_regime: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A sentence naming the splits' regimes (:meth:`ValidationReport.by_regime`, at least
    TARGET_MIN_ROWS rows) whose share inside the interval lies outside TARGET_INSIDE."""
    kept = [(split, c) for split, cells in by_regime.items() for c in cells if c["rows"] >= TARGET_MIN_ROWS]
    off = [(split, c) for split, c in kept if coverage_verdict(c)]
    lo, hi = (f"{x * 100:.0f}" for x in TARGET_INSIDE)
    text = (f"Coverage target: {lo}–{hi}% inside in every split's regime of at least {TARGET_MIN_ROWS} rows; "
            f"{len(kept) - len(off)} of {len(kept)} meet it")
    if off:
        text += "; " + "; ".join(f"{split} {c['group'].split(' (')[0]} {c['inside_interval'] * 100:.0f}% "
                                 f"({coverage_verdict(c)})" for split, c in off)
    return ["", text + "."]


def format_ratio(r: float | None) -> str:
    """An interval's width as its high end over its low end (blank when unknown)."""
    return "" if r is None else f"x{r:.2f}"


# --------------------------------------------------------------------------- outputs


def floor_sentence(f: ReplicateFloor) -> str:
    """One paragraph: how far the corpus's repeated measurements of a configuration scatter."""
    models = ", ".join(f"{m} {mape:.1f}%" for m, mape, _ in f.by_model)
    return (f"Noise floor{f' ({f.corpus})' if f.corpus else ''}: {f.rows} multi-GPU rows are repeated measurements "
            f"of {f.configurations} configurations (same model and per-worker batch, same GPUs on each node up to "
            f"the order of the nodes); each lies on average {f.mape:.1f}% from its configuration's mean "
            f"({models}). A model that sees only the configuration cannot expect to predict these rows more "
            "closely; the splits' errors above include this scatter (srifty.validate.replicate_floor).")


def render_markdown(report: ValidationReport, command: str, corpus: Sequence[str], plot: str | None) -> str:
    pooled = report.pooled()
    lines = [
        "# Latency-model accuracy",
        "",
        f"Generated by `{command}` on {dt.date.today().isoformat()} from {', '.join(corpus)}. "
        "Rerun it to reproduce; nothing on this page is typed by hand.",
        "",
        "Absolute percentage error of the predicted iteration time per split (all folds pooled), "
        "for the learned model and the baselines on the same rows, the share of the rows inside the model's "
        "5–95% interval and that interval's width (its high end over its low end, the median over the rows). "
        "See srifty/validate/folds.py for the splits and docs/latency-model.md for the model.",
        "",
        "- `lomo-1gpu` / `lomo-1node`: leave one model out; the held-out model is known by its single-GPU "
        "(single-node) runs only, the residual model trains on the other models.",
        "- `nodes>4`: trained on runs with at most 4 nodes, tested on larger ones.",
        "- `loio`: leave one instance type out (its compute transferred from the other types).",
        "- `loco`: leave one configuration out: each multi-host configuration predicted from each model's "
        "single-host profiles and the allreduce sweeps of the other configurations.",
        "- methods: `model` = calibrated simulator × learned residual; `simulator` = the simulator with the "
        "catalog's link figures (emulated: configured rate × tbf framing goodput); `pollux` = Pollux-style "
        "(T_compute^γ + T_sync^γ)^(1/γ) fitted on the training rows; `linear` = the slowest worker's "
        "single-worker step time (perfect scaling).",
        "",
        "| split | rows | method | MAPE % | median % | p90 % | inside the model's 5–95% interval % "
        "| its width, high/low (median) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for split, ms in pooled.items():
        for m in METHODS:
            s = ms[m]
            inside = f"{s['inside_interval'] * 100:.0f}" if "inside_interval" in s else ""
            lines.append(f"| {split} | {s['n']} | {m} | {s['mape']:.1f} | {s['median']:.1f} | {s['p90']:.1f} "
                         f"| {inside} | {format_ratio(s.get('interval_ratio'))} |")
    lines += ["", "Per fold (MAPE %):", "", "| split | fold | rows | " + " | ".join(METHODS) + " | model best? |",
              "|---|---|---:|" + "---:|" * len(METHODS) + "---|"]
    for r in report.results:
        st = r.stats()
        best = min(METHODS, key=lambda m: st[m]["mape"])
        lines.append(f"| {r.split} | {r.fold} | {r.n} | " + " | ".join(f"{st[m]['mape']:.1f}" for m in METHODS)
                     + f" | {'yes' if best == 'model' else 'no: ' + best} |")
    not_best = [f"{r.split}/{r.fold}" for r in report.results
                if min(METHODS, key=lambda m: r.stats()[m]["mape"]) != "model"]
    by_nodes = report.grad_known_by_nodes()
    for split, (mape, n) in report.pooled_grad_known().items():
        lines += ["", f"{split}: over the {n} rows whose gradient size the profile states (parameter count or "
                  f"gradient bytes; the others have neither, so their communication cannot be simulated), "
                  f"the model's MAPE is {mape:.1f}%"
                  + (" ({:.1f}% over the {} rows on one node, {:.1f}% over the {} on several).".format(
                      *by_nodes[split][0], *by_nodes[split][1]) if split in by_nodes else ".")]
    for f in report.floors:
        lines += ["", floor_sentence(f)]
    by_regime = report.by_regime()
    lines += render_breakdown("By regime: each held-out row by its measured share of the step beyond its slowest "
                              "worker's compute alone (exposed communication, and what else data parallelism "
                              "costs). The interval promises 90% inside in every row of this table. The last "
                              f"column is the share within ±{BIN_MIN_HALF_WIDTH:.2f} in log of the prediction "
                              "(−10% to +11%), twice the scatter of repeated runs on a real cluster (the noise "
                              "floor above; emulated runs scatter further): where that share alone is above 95%, "
                              "no honest interval could hold fewer.", by_regime)
    lines += render_coverage_verdicts(by_regime)
    lines += render_breakdown("By node count:", report.by_nodes())
    lines += render_fold_regimes(report.by_fold_and_regime())
    lines += render_fold_nodes(report.by_fold_and_nodes())
    lines += ["", ("The learned model does **not** beat every baseline on: " + ", ".join(not_best) + ".")
              if not_best else "The learned model beats every baseline on every fold."]
    pooled_losses = []
    for split, by_method in report.pooled().items():
        best = min(METHODS, key=lambda m: by_method[m]["mape"])
        if best != "model":
            pooled_losses.append(f"{split} ({best} {by_method[best]['mape']:.1f}% against the model's "
                                 f"{by_method['model']['mape']:.1f}%)")
    lines += ["", ("Pooled over its folds, a baseline is better on: " + ", ".join(pooled_losses) + ".")
              if pooled_losses else "Pooled over its folds, the learned model beats every baseline on every split."]
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    if plot:
        lines += ["", f"![predicted vs measured]({plot})"]
    return "\n".join(lines) + "\n"


def write_plot(report: ValidationReport, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    splits = list(dict.fromkeys(r.split for r in report.results))
    fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 4.2), squeeze=False)
    for ax, split in zip(axes[0], splits):
        rs = [r for r in report.results if r.split == split]
        y = np.concatenate([r.measured for r in rs])
        for m, style in (("simulator", "x"), ("model", ".")):
            ax.scatter(y, np.concatenate([r.predicted[m] for r in rs]), s=4, marker=style, alpha=0.5, label=m)
        lo, hi = float(y.min()) * 0.8, float(y.max()) * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(split)
        ax.set_xlabel("measured iteration ms")
        ax.set_ylabel("predicted ms")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)

# --------------------------------------------------------------------------- the README's summary line

README_START = "<!-- accuracy summary: generated by `srifty validate --readme README.md` (make accuracy); do not edit -->"
README_END = "<!-- end of the generated accuracy summary -->"


def render_readme_summary(report: ValidationReport, command: str) -> str:
    """The README's one-line summary of the accuracy report, between the marker lines: the model's
    pooled held-out error on each corpus's first split (leave one model out on traces, one
    configuration out on the emulated cluster) with what the split holds out, the error over the
    rows whose gradient size is stated where some lack it, and the corpus's noise floor; how many
    folds it wins against every baseline; and the link to docs/ACCURACY.md, which has everything
    else, the allreduce and GPU-transfer checks included."""
    what = {"lomo-1gpu": "a model never seen, from its single-GPU runs",  # what each split holds out
            "lomo-1node": "a model never seen, from its single-node runs",
            "nodes>4": "clusters larger than any trained on",
            "loio": "an instance type never profiled", "loco": "a configuration never run"}
    pooled, known = report.pooled(), report.pooled_grad_known()
    floors = {f.corpus: f for f in report.floors}
    headline: dict[str, str] = {}  # corpus prefix -> its first split
    for split in pooled:
        headline.setdefault(split.rpartition("/")[0], split)
    parts = []
    for corpus, split in headline.items():
        kind = what.get(split.rpartition("/")[2])
        extra = [kind] if kind else []
        if split in known:
            extra.append(f"{known[split][0]:.1f}% on the {known[split][1]} rows whose gradient size is stated")
        if corpus in floors:
            extra.append(f"noise floor {floors[corpus].mape:.1f}%")
        parts.append(f"{split} {pooled[split]['model']['mape']:.1f}%" + (f" ({'; '.join(extra)})" if extra else ""))
    wins = sum(min(METHODS, key=lambda m: r.stats()[m]["mape"]) == "model" for r in report.results)
    line = (f"Latency-model accuracy, held-out iteration-time MAPE with all folds pooled: {', '.join(parts)}; "
            f"the model beats every baseline in {wins} of {len(report.results)} folds. From `{command}` on "
            f"{dt.date.today().isoformat()}; every split, baseline, interval and fold: "
            "[docs/ACCURACY.md](docs/ACCURACY.md).")
    return "\n".join([README_START, line, README_END])


def replace_readme_summary(readme: str, table: str) -> str:
    """``readme`` with the text from README_START to README_END replaced by ``table`` (the
    markers included: ``table`` carries them)."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise SriftyError("The README has no generated accuracy summary to replace.",
                          f"Put the two marker lines where the summary goes:\n{README_START}\n{README_END}")
    return readme[:start] + table + readme[end + len(README_END):]
