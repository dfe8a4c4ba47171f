"""``srifty import``, ``fit``, ``predict`` and ``validate``: thin shells over the latency-model library.

scikit-learn, pandas and matplotlib are imported inside the command functions only.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import click

from srifty.commands import params
from srifty.errors import SriftyError
from srifty.outputs import Input, Output, check_plot_format, check_writable, refuse_clobbering


def _warn(msg: str) -> None:
    click.echo(f"warning: {msg}", err=True)


@click.command("import", epilog="""\b
Examples:
  srifty import data/traces/pollux_g4dn12xlarge.import.csv --out profiles/pollux
  srifty import my_trace.csv --out profiles/mine --skip-bad

Columns: model, instance_type, placement, local_batch_size, step_time_s; optional
sync_time_s, param_count, grad_bytes, precision, conv_flop_share (the share of the forward's
FLOPs in convolutions, 0-1: picks the GPU speed factors when compute is carried to another
GPU; without it srifty takes the middle). placement = workers per node joined by
'+' (4+4, 1+1+1+3). Writes DIR/<model>/<instance_type>.json; a profile imported there
before keeps its runs and gains the new ones (--replace starts afresh). Give param_count (or
grad_bytes): without it, or a one-node multi-worker row with sync_time_s, communication
cannot be simulated and multi-worker predictions get a wide interval and a warning. Give
sync_time_s (the step's wait on the allreduce beyond its compute) on multi-worker rows, or
single-worker rows at the same batch sizes (a run's step less theirs stands for it): srifty
reads off them how much of the allreduce backward hides.
""")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for the profiles.")
@click.option("--skip-bad", is_flag=True, help="Import the good rows and list the bad ones (instead of failing).")
@click.option("--replace", is_flag=True, help="Replace profiles already in DIR (default: add the runs to imported "
              "ones, refuse to touch recorded ones).")
def import_cmd(trace: str, out_dir: str, skip_bad: bool, replace: bool) -> None:
    """Turn a CSV trace of measured runs into profiles (one per model and instance type)."""
    from srifty import api

    result = api.import_trace(trace, out_dir, skip_bad=skip_bad, replace=replace)
    for path in result.merged:
        click.echo(f"note: {path} already held imported runs: the new ones were added to them", err=True)
    for line, why in result.bad_rows:
        click.echo(f"skipped line {line}: {why}", err=True)
    for path in result.written:
        click.echo(path)
    for note in result.notes:
        click.echo(f"warning: {note}", err=True)
    click.echo(f"imported {result.rows} run(s) into {len(result.written)} profile(s)"
               + (f"; skipped {len(result.bad_rows)} bad row(s)" if result.bad_rows else ""), err=True)


@click.command("import-nccl", epilog="""\b
Examples:
  mpirun -np 16 -N 8 -x NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 2G -f 2 > p4d-2nodes.log   # on the cluster
  srifty import-nccl p4d-2nodes.log --instance-type p4d.24xlarge --out mine/p4d-nccl.json
  srifty import-nccl p5en-1node.log -t p5en.48xlarge --out mine/p5en-nvlink.json   # one node: its NVLink
  srifty fit profiles/pollux profiles/lambda profiles/emulated mine/ --out model.npz
  srifty predict --profile my.json --config 4xp4d.24xlarge --model model.npz

\b
Reads the result table of nccl-tests' all_reduce_perf (its out-of-place times), the
'# Rank N ... on HOST device ...' lines (how many GPUs ran on how many nodes; else give
--nodes and --gpus-per-node, and --nodes where containers all print one hostname) and,
where NCCL_DEBUG=INFO was set, NCCL's 'Using network' line (EFA or TCP sockets; else
--transport on a type with EFA). The profile it writes is what `srifty profile
--collectives` writes: put it in a corpus and `srifty fit` takes the type's network from
it (its TCP figure, or its EFA and NVLink efficiencies) instead of the catalog's. The log
must be an allreduce with messages of 1 MiB or more, across two or more nodes, or within
one node of a type whose GPUs share NVLink (its NVLink alone).
""")
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--instance-type", "-t", required=True, help="The instance type the log was recorded on.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The collectives profile to write.")
@click.option("--transport", type=click.Choice(["efa", "tcp"]), default=None,
              help="What NCCL ran over, where the log does not say (no NCCL_DEBUG=INFO line).")
@click.option("--placement-group/--no-placement-group", default=False, show_default=True,
              help="Whether the nodes sat in a cluster placement group (10 Gbit/s per TCP flow, not 5).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Nodes the run used, where the log has no Rank lines or they all name one host.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs per node, where the log has no Rank lines.")
def import_nccl_cmd(log: str, instance_type: str, out: str, transport: str | None, placement_group: bool,
                    nodes: int | None, gpus_per_node: int | None) -> None:
    """Turn nccl-tests' all_reduce_perf output into the network measurement srifty fits."""
    from srifty import api
    from srifty.catalog import Catalog
    from srifty.nccltests import TRANSPORT_NAMES, WITHIN_NODE

    got = api.import_nccl_tests(log, out, instance_type, Catalog.default(), transport=transport,
                                placement_group=placement_group, nodes=nodes, gpus_per_node=gpus_per_node)
    for note in got.notes:
        _warn(note)
    click.echo(out)
    sizes = len(got.doc["collectives"])
    gpus = "+".join(map(str, got.gpus_per_node))
    click.echo(f"imported {sizes} message sizes of an allreduce on {got.nodes} x {instance_type} ({gpus} GPUs, over "
               f"{TRANSPORT_NAMES[got.transport]}), {got.rows_fitted} of them 1 MiB or more; `srifty fit` on a corpus "
               f"holding it takes the type's {'NVLink' if got.transport == WITHIN_NODE else 'network'} from them",
               err=True)


@click.command("fit", epilog="""\b
Examples:
  srifty fit                                 # the shipped corpus (profiles/pollux, profiles/lambda, profiles/emulated)
  srifty fit profiles/pollux my_profiles/ --out model.npz
""")
@click.argument("corpus", nargs=-1, type=click.Path())
@click.option("--out", "-o", default="latency-model.npz", show_default=True, type=click.Path(dir_okay=False),
              help="Model file to write (numpy arrays and JSON; no pickle).")
@click.option("--quick", is_flag=True, help="A smaller fit (for CI).")
def fit_cmd(corpus: tuple[str, ...], out: str, quick: bool) -> None:
    """Train the latency model on profiles with multi-worker runs and save it."""
    from srifty import api
    from srifty.comm import TCP_ON_EFA_NOTE
    from srifty.model import UNCALIBRATED_NOTE

    pred = api.fit(corpus, out, quick)
    meta = pred.meta
    for regime in meta.get("uncalibrated_regimes", []):
        click.echo(f"warning: {regime} runs: {UNCALIBRATED_NOTE}.", err=True)
    for itype in meta.get("tcp_on_efa_types", []):
        click.echo(f"warning: {TCP_ON_EFA_NOTE.format(itype=itype)}", err=True)
    click.echo(json.dumps({"out": out, "rows": meta["rows"], "models": meta["models"],
                           "instance_types": meta["instance_types"], "link_scale": meta["link_scale"],
                           "overlap_windows": meta.get("overlap_windows", {}), "data_sha256": meta["data_sha256"]},
                          indent=1))


class _ConfigRequest(NamedTuple):
    """One configuration asked for: its per-worker batch, each type's own batch, and its line in
    the --configs file (0: given by --config)."""

    config: str
    batch: int | None
    type_batches: dict[str, float]
    line: int


def _read_configs_csv(path: str) -> list[_ConfigRequest]:
    rows = []
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if "config" not in (reader.fieldnames or []):
                raise SriftyError(f"{path}: needs a 'config' column (and optionally 'local_batch_size' and "
                                  f"'batch_split').")
            for i, rec in enumerate(reader, start=2):
                b = (rec.get("local_batch_size") or "").strip()
                try:
                    batch = int(b) if b else None
                except ValueError:
                    batch = 0
                if batch is not None and not 1 <= batch <= params.MAX_BATCH:
                    raise SriftyError(f"{path} line {i}: local_batch_size {b!r} is not a whole number of 1 to "
                                      f"{params.MAX_BATCH:,}.", "Leave it empty for the profile's batch.")
                split = _parse_type_batches([rec.get("batch_split") or ""], f"{path} line {i}: batch_split",
                                            whole=False)
                rows.append(_ConfigRequest((rec["config"] or "").strip(), batch, split, i))
    except (OSError, UnicodeDecodeError) as exc:
        raise SriftyError(f"--configs {path}: cannot read it as a CSV file ({getattr(exc, 'strerror', None) or exc}).",
                          "--configs takes a CSV file with a config column (and optionally local_batch_size and "
                          "batch_split), one configuration per line; for one configuration use --config.") from None
    return rows


def _parse_type_batches(texts: Sequence[str], what: str, whole: bool = True) -> dict[str, float]:
    """TYPE=BATCH items (repeated, or joined with commas or semicolons) as {type: batch}: whole
    batches (``whole``, as --type-batch takes them), else any above 0, as `recommend --csv` writes
    a mix's shares. ``what`` names where they were given, in an error."""
    out: dict[str, float] = {}
    for item in (part.strip() for text in texts for part in re.split(r"[,;]", text) if part.strip()):
        name, _, value = item.partition("=")
        try:
            batch: float = int(value) if whole else float(value)
        except ValueError:
            batch = 0
        if not name.strip() or not 0 < batch <= params.MAX_BATCH:
            size = "a whole batch of 1" if whole else "a batch above 0"
            raise SriftyError(f"{what} {item!r}: expected TYPE=BATCH, {size} to {params.MAX_BATCH:,}.",
                              "e.g. --type-batch p4d.24xlarge=43, or in a --configs file a batch_split column "
                              "of p3dn.24xlarge=21.5;p4d.24xlarge=42.5 (as `srifty recommend --csv` writes it)")
        out[name.strip()] = batch
    return out


def _grouped_warnings(results: Sequence[Any]) -> list[str]:
    """Each distinct warning of ``results`` once, in order, naming the rows it concerns: a warning
    that 1,000 rows share is one line, not 1,000."""
    rows: dict[str, list[str]] = {}
    for r in results:
        for w in r.warnings:
            names = rows.setdefault(w, [])
            label = f"{r.config} at batch {r.batch_text()}" if len(results) > 1 else r.config
            if label not in names:
                names.append(label)
    out = []
    for w, names in rows.items():
        if len(results) > 1 and len(names) == len(results):
            where = f"every row ({len(names)})"
        elif len(names) > 3:
            where = f"{', '.join(names[:3])} and {len(names) - 3} more row(s)"
        else:
            where = ", ".join(names)
        out.append(f"{where}: {w}")
    return out


@click.command("predict", epilog="""\b
Examples:
  srifty predict --profile profiles/pollux/imagenet --config 4xg4dn.12xlarge --local-batch-size 64
  srifty predict --profile profiles/pollux/cifar10/g4dn.12xlarge.json --config 2xg4dn.12xlarge:2 --json
  srifty predict --profile profiles/pollux/imagenet --config 2xg4dn.12xlarge --config 4xg4dn.xlarge -b 32
  srifty predict --profile profiles/pollux/ncf --configs candidates.csv   # columns config,local_batch_size
  srifty recommend --profile profiles/local/cnn_resnet.json --budget 12 --csv > ranked.csv
  srifty predict --profile profiles/local/cnn_resnet.json --configs ranked.csv   # the rows as predict has them
  srifty predict --profile profiles/local/cnn_resnet.json --config 1xp3dn.24xlarge+1xp4d.24xlarge \
      --type-batch p3dn.24xlarge=21 --type-batch p4d.24xlarge=43   # a mix's split, as its plan starts it

Config syntax: [COUNT x]INSTANCE_TYPE[:WORKERS_PER_NODE][@spot] joined by '+'.
On a terminal the rows are a table with their parts; piped, one line each.
With several rows, each warning is said once, with the rows it concerns (and with --json, in each
row's `warnings`). With --json each row also has `parts`: the slowest worker's compute alone
(compute_ms) and the rest of the step (communication_ms), with where each came from:
compute_source measured | profiled | profiled-other-batch | transferred, and for a transferred
one compute_transfer, how: a list of same-gpu (a type with the same GPU board: the profiled
compute as it is) | operator-model | cpu-factors | gpu-speed-factors | spec-speed (the spec
speeds alone, the widest interval); network_source none |
unknown | measured | emulated-sweeps | fitted-on-type | prior (the catalog's link figures with
efficiencies fitted on other instance types); overlap_source (how much of it backward hides) none
| measured | recorded | read-from-sync | read-from-steps (a trace without sync times: its
multi-worker steps less its single-worker ones) | default-checked (DDP's usual overlap, which
the trace's sync or step times did not overturn) | recorded-on-cpu (DDP's usual overlap on GPUs:
ready times recorded on a CPU do not carry to a GPU) | default (DDP's usual overlap, neither
recorded nor read); gradient_source (the gradient size it is simulated with) none | measured | unknown |
stated | read-from-sync (a trace without param_count: the size whose simulated single-node runs
match their sync times). memory_gib is one worker's tensor memory at its batch, where the profile
counted it (or, without a count, the floor of parameters and gradients; null where neither is
known); a row whose GPU cannot hold it says so in its warnings (docs/recommend.md, GPU memory).

Without --model: the model shipped with srifty ($SRIFTY_MODEL: another file).
""")
@click.option("--profile", "profile_path", required=True, type=click.Path(),
              help="A profile file, or a directory with one model's profiles (several instance types).")
@click.option("--config", "config_texts", multiple=True,
              help="Cluster configuration, e.g. 2xp3.8xlarge+1xg5.12xlarge; repeat it for several.")
@click.option("--configs", "configs_csv", type=click.Path(dir_okay=False),
              help="CSV with a config column and optionally local_batch_size and batch_split (TYPE=BATCH;... : "
                   "each type's own batch, as `recommend --csv` writes it).")
@click.option("--local-batch-size", "-b", type=params.BATCH, help="Per-worker batch size (default: the profiled batch; of several, the one most runs measured).")
@click.option("--type-batch", "type_batch_texts", multiple=True, metavar="TYPE=BATCH",
              help="Every worker of TYPE at this per-worker batch instead (a mix's types at their own batches, "
                   "as a plan of `recommend` starts them); repeat it, or join them with commas.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), help="A model file from `srifty fit`.")
@click.option("--catalog", "catalog_path", type=click.Path(), help="Catalog CSV or emulated YAML (default: EC2).")
@click.option("--placement-group", is_flag=True, help="Nodes in a cluster placement group (10 Gbit/s per TCP "
              "flow between them, not 5).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def predict_cmd(profile_path: str, config_texts: tuple[str, ...], configs_csv: str | None, local_batch_size: int | None,
                type_batch_texts: tuple[str, ...], model_path: str | None, catalog_path: str | None,
                placement_group: bool, as_json: bool) -> None:
    """Predict iteration time and throughput of a profiled model on other configurations."""
    from srifty import api

    if bool(config_texts) == bool(configs_csv):
        raise SriftyError("Give the configurations by --config (once or more) or by --configs, one of the two.",
                          "e.g. --config 4xg4dn.12xlarge --config 2xg5.12xlarge")
    requests = ([_ConfigRequest(text, local_batch_size, {}, 0) for text in config_texts] if config_texts
                else _read_configs_csv(configs_csv or ""))
    # --model FILE, or the model `srifty recommend` also uses (trained once and cached)
    results = api.predict([profile_path], [(r.config, r.batch) if r.batch else r.config for r in requests],
                          local_batch_size, model_path, catalog_path, placement_group,
                          say=lambda msg: click.echo(msg, err=True),
                          where=[f" ({configs_csv} line {r.line})" if r.line else "" for r in requests],
                          type_batches=_parse_type_batches(type_batch_texts, "--type-batch"),
                          row_type_batches=[r.type_batches for r in requests])
    for w in _grouped_warnings(results):
        _warn(w)
    if not as_json and sys.stdout.isatty():
        from rich.console import Console

        Console(soft_wrap=False).print(_predictions_table(results))
        return
    for r in results:
        if as_json:
            d = r.to_dict()
            click.echo(json.dumps({k: d[k] for k in ("config", "local_batch_size", "batch_split", "iteration_ms",
                                                       "interval_ms", "throughput_samples_per_s", "source", "parts",
                                                       "memory_gib", "warnings") if k in d}))
        else:
            click.echo(f"{r.config:<40} batch {r.batch_text():>5}  {r.iteration_ms:9.1f} ms "
                       f"[{r.interval_ms[0]:.1f}, {r.interval_ms[1]:.1f}]  {r.throughput_samples_per_s:10.1f} samples/s"
                       f"  {r.source}")


def _predictions_table(results: Sequence[Any]) -> Any:
    """`srifty predict`'s rows as a table for a terminal: each row's step and 5-95% interval, and
    its two parts with where each came from (`--json`'s `parts`)."""
    from rich.table import Table

    t = Table(title="iteration time, its 5-95% interval, and its parts: where each came from", title_justify="left")
    for col, just in [("config", "left"), ("batch", "right"), ("iter ms", "right"), ("5-95%", "right"),
                      ("samples/s", "right"), ("compute ms", "right"), ("compute from", "left"),
                      ("rest ms", "right"), ("network", "left")]:
        t.add_column(col, justify=just, no_wrap=col in ("config", "compute from", "network"))
    for r in results:
        parts = r.to_dict()["parts"]
        carried = f" ({', '.join(parts['compute_transfer'])})" if parts.get("compute_transfer") else ""
        t.add_row(r.config, r.batch_text(), f"{r.iteration_ms:,.1f}",
                  "–".join(f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}" for ms in r.interval_ms),
                  f"{r.throughput_samples_per_s:,.1f}",
                  f"{parts['compute_ms']:,.1f}", parts["compute_source"] + carried,
                  f"{parts['communication_ms']:,.1f}", parts["network_source"])
    return t


def _print_holdout(check: Any, as_json: bool) -> None:
    from srifty.validate.report import format_ratio

    if as_json:
        click.echo(json.dumps(check.to_dict(), indent=1))
        return
    for by, title in (("nodes", "node count"), ("regime", "regime (measured share of the step beyond compute)")):
        click.echo(f"\nBy {title}: MAPE and signed median error % (negative: predicted too fast), share inside "
                   "the 5-95% interval and its median width (high/low); baselines' MAPE %: the simulator with "
                   "catalog links, compute alone")
        cells = check.cells(by)
        w = max([len("model")] + [len(c["model"]) for c in cells])
        g = max([len("rows of")] + [len(c["group"]) for c in cells])
        click.echo(f"{'model':<{w}}  {'rows of':<{g}}  {'rows':>5}  {'MAPE':>6}  {'signed':>7}  {'inside':>6}  "
                   f"{'width':>6}  {'simulator':>9}  {'compute':>7}")
        for c in cells:
            click.echo(f"{c['model']:<{w}}  {c['group']:<{g}}  {c['rows']:>5}  {c['mape']:>6.1f}  "
                       f"{c['signed_median']:>+7.1f}  {c['inside_interval'] * 100:>5.0f}%  "
                       f"{format_ratio(c['interval_ratio']):>6}  {c['simulator_mape']:>9.1f}  "
                       f"{c['linear_mape']:>7.1f}")
    click.echo("\nHow each model's communication was read (the predictions' parts; `srifty predict --help` "
               "lists the values):")
    for model, gradient, overlap, n in check.sources():
        click.echo(f"{model}: gradient size {gradient}, overlap {overlap} ({n} rows)")


@click.command("validate", epilog="""\b
Examples:
  srifty validate --quick
  srifty validate profiles/pollux profiles/emulated --out docs/ACCURACY.md --plot docs/accuracy.png
  srifty validate --out docs/ACCURACY.md --plot docs/accuracy.png --readme README.md
  srifty validate --holdout my_trace.csv                  # the model srifty predict uses, on your runs
  srifty validate --holdout my_trace.csv --model mine.npz # a model from srifty fit

--holdout checks a trained model on measurements it never saw: each model's runs across nodes
in the trace (srifty import's columns) or profiles, predicted from its runs on one node alone,
as srifty predict answers a trace imported with those rows only; by node count and by regime
(the measured share of the step beyond its slowest worker's compute), and how each model's
communication was read (its gradient size stated or read off its sync times; its overlap).
""")
@click.argument("corpus", nargs=-1, type=click.Path())
@click.option("--quick", is_flag=True, help="Smaller fits and fewer splits (lomo-1gpu and nodes>4; emulated: loco and "
              "lomo-1node) (CI, < 3 min).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the Markdown report here (e.g. docs/ACCURACY.md).")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a predicted-vs-measured PNG here.")
@click.option("--readme", type=click.Path(dir_okay=False, exists=True),
              help="Replace the generated accuracy summary line in this README (between its marker lines).")
@click.option("--holdout", "holdout", multiple=True, type=click.Path(exists=True),
              help="A trace CSV or profiles whose runs across nodes to predict from their single-node runs "
              "(repeatable); replaces the cross-validation.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), help="With --holdout: a model file from "
              "`srifty fit` (default: the one srifty predict uses).")
@click.option("--json", "as_json", is_flag=True, help="Print the pooled figures as JSON.")
def validate_cmd(corpus: tuple[str, ...], quick: bool, out: str | None, plot: str | None, readme: str | None,
                 holdout: tuple[str, ...], model_path: str | None, as_json: bool) -> None:
    """Grouped cross-validation of the latency model against baselines (never tests on training data)."""
    from srifty import api, cpu_to_gpu
    from srifty import model as m
    from srifty import validate as v
    from srifty.profile import atomic_write_text

    if holdout:
        if corpus or quick or out or plot or readme:
            raise SriftyError("--holdout checks a trained model on its own; it takes no corpus, --quick, --out, "
                              "--plot or --readme.", "Run `srifty validate --holdout TRACE` alone (with --model, "
                              "--json).")
        _print_holdout(api.validate_holdout(holdout, model_path, say=lambda line: click.echo(line, err=True)),
                       as_json)
        return
    if model_path:
        raise SriftyError("--model goes with --holdout: the cross-validation fits its own models.",
                          "Drop --model, or add --holdout TRACE.")

    paths = m.corpus_paths(corpus)
    outputs = [o for o in (Output(out or "", "--out"), Output(plot or "", "--plot")) if o.path]
    refuse_clobbering(outputs, [Input(p, "the corpus") for p in paths] + [Input(readme, "--readme")])
    for o in outputs:
        check_writable(o)
    if plot:
        check_plot_format(plot)
    if readme:  # no markers: say so before minutes of fitting
        v.replace_readme_summary(Path(readme).read_text(), "")
    done = api.validate(corpus, quick, say=lambda line: click.echo(line, err=True))
    report, checks, transfer, cpu_gpu = done.report, done.allreduce, done.gpu_transfer, done.cpu_to_gpu
    command = "srifty validate " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["validate"] else "srifty validate"
    if plot:
        v.write_plot(report, plot)
    if out:
        plot_ref = None
        if plot:
            plot_ref = str(Path(plot).resolve().relative_to(Path(out).resolve().parent)) \
                if Path(plot).resolve().is_relative_to(Path(out).resolve().parent) else plot
        atomic_write_text(out, done.markdown(command, plot_ref))
    if readme:
        text = Path(readme).read_text()
        atomic_write_text(readme, v.replace_readme_summary(text, v.render_readme_summary(report, command)))
    if as_json:
        click.echo(json.dumps(done.to_dict(), indent=1))
        return
    pooled = report.pooled()
    w = max([12] + [len(k) for k in pooled])
    click.echo(f"{'split':<{w}} {'rows':>5}  " + "  ".join(f"{m_:>22}" for m_ in v.METHODS))
    click.echo(f"{'':<{w}} {'':>5}  " + "  ".join(f"{'MAPE/median/p90 %':>22}" for _ in v.METHODS))
    for split, ms in pooled.items():
        cells = "  ".join(f"{ms[k]['mape']:>8.1f}/{ms[k]['median']:>5.1f}/{ms[k]['p90']:>6.1f}" for k in v.METHODS)
        click.echo(f"{split:<{w}} {ms['model']['n']:>5}  {cells}")
    for r in report.results:
        st = r.stats()
        best = min(v.METHODS, key=lambda k: st[k]["mape"])
        if best != "model":
            click.echo(f"note: {r.split}/{r.fold}: {best} ({st[best]['mape']:.1f}%) beats the model "
                       f"({st['model']['mape']:.1f}%)", err=True)
    for f in report.floors:
        click.echo(f"noise floor{' ' + f.corpus if f.corpus else ''}: {f.rows} repeated rows lie {f.mape:.1f}% "
                   "from their configuration's mean (MAPE)")
    for c in checks:
        click.echo(f"allreduce {c.instance_type} {c.nodes}x{c.gpus_per_node} ({len(c.sizes)} sizes): MAPE "
                   + ", ".join(f"{k} {c.mape(k):.1f}%" for k in v.COMM_METHODS))
    for ds, mine in v.by_dataset(transfer).items():
        click.echo(f"GPU transfer ({ds}, {len(mine)} transfers): MAPE "
                   + ", ".join(f"{k} {e.mean():.1f}%" for k, e in v.transfer_errors(mine).items()))
    labels = {"leave_one_model_out": "leave one model out", "leave_one_gpu_out": "leave one GPU out"}
    for held, got in (cpu_to_gpu.summary(cpu_gpu) if cpu_gpu else {}).items():
        if got["pairs"]:
            click.echo(f"CPU profile to GPU ({got['pairs']} steps, {labels[held]}): median error "
                       f"{100 * got['median_abs_error']:.0f}%, {got['inside']} inside their interval")
    for c in done.cpu_timeline:
        got = c.cells()
        click.echo(f"CPU timeline on GPUs, {c.model} ({got['taken']['rows']} runs): MAPE "
                   f"{got['taken']['mape']:.1f}%, {got['taken']['inside']:.0f}% inside as srifty takes it; "
                   f"{got['as_recorded']['mape']:.1f}%, {got['as_recorded']['inside']:.0f}% with the CPU's ready times")
    for n in done.notes:
        click.echo(f"note: {n}", err=True)
