"""The ``srifty`` command line: a thin shell over the library.

Start-up stays fast: this module imports only click and srifty's own light modules;
torch, scikit-learn and boto3 are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from srifty import __version__
from srifty.commands import params
from srifty.profiling import request as request_defaults
from srifty.errors import SriftyError, exit_interrupted, terminate_as_interrupt

EPILOG_PROFILE = """\b
Examples:
  srifty profile examples/cnn_resnet.py --nproc 2
  srifty profile examples/transformer_lm.py --nproc 2 --batch-size 16 --out lm.json
  srifty profile examples/cnn_resnet.py --batch-size 32,128,512 --out cnn/   # one profile per batch
  srifty profile train.py --nproc 2 -- --epochs 1 --lr 0.1   # args after -- go to the script
  srifty profile -m mypkg.train --nproc 2 -- --epochs 1   # a module, as `torchrun -m` runs it
  srifty profile examples/cnn_resnet.py --nproc 2 --dry-run
  srifty profile --collectives --world-sizes 2 --out allreduce.json
  sudo srifty profile examples/cnn_resnet.py --backend emulated --hosts emu.medium:2,emu.small:1

The per-worker batch size from --batch-size reaches the script as the environment
variable SRIFTY_BATCH_SIZE, and after the script's arguments as NAME N with --batch-arg NAME
(--per_device_train_batch_size for a HuggingFace script; --pass-batch-arg: --batch-size N). The script
needs no change: srifty times DDP's forward, backward, each gradient bucket's
allreduce and the optimizer step from outside. Several batch sizes (--batch-size 32,128)
run one after the other into a directory, one profile per batch, that --profile takes
whole: predictions between them are interpolated, not extrapolated from one batch.
"""


class Context:
    def __init__(self, debug: bool) -> None:
        self.debug = debug


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


# Commands that live in their own modules, loaded only when used (or listed by --help).
# Each entry: command name -> "module:attribute" of a click command or group.
LAZY_COMMANDS: dict[str, str] = {
    "catalog": "srifty.commands.catalog:catalog",
    "cluster": "srifty.commands.cluster:cluster",
    "import": "srifty.commands.latency:import_cmd",
    "import-nccl": "srifty.commands.latency:import_nccl_cmd",
    "fit": "srifty.commands.latency:fit_cmd",
    "predict": "srifty.commands.latency:predict_cmd",
    "validate": "srifty.commands.latency:validate_cmd",
    "recommend": "srifty.commands.recommend:recommend",
    "ec2": "srifty.commands.ec2:ec2",
    "evaluate": "srifty.commands.evaluate:evaluate",
    "launch": "srifty.commands.launch:launch",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands in LAZY_COMMANDS are imported on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            import importlib

            module, attr = LAZY_COMMANDS[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="srifty")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """srifty: which cloud VMs to rent for data-parallel PyTorch training.

    \b
    Profile your real DDP training script for a short time, predict its speed on
    other instance types, node counts and mixes, and get the configurations that
    meet your budget, throughput and deadline, ranked.

    \b
    Start here:
      srifty profile examples/cnn_resnet.py --nproc 2 --out cnn.json
      srifty show cnn.json
      srifty predict --profile cnn.json --config 2xg4dn.12xlarge
      srifty recommend --profile cnn.json --budget 12
    """
    ctx.obj = Context(debug)


@cli.command(
    "profile",
    epilog=EPILOG_PROFILE,
    context_settings={"ignore_unknown_options": True},
)
@click.argument("script", required=False, type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--module", "-m", metavar="NAME", help="Run the training code as `python -m NAME` (as `torchrun -m NAME` "
              "does), from this directory, in place of a SCRIPT.")
@click.option("--nproc", type=params.WORKERS, default=1, show_default=True, help="Workers (torchrun processes) per host.")
@click.option("--batch-size", "batch_sizes", help="Per-worker batch size, passed to the script as SRIFTY_BATCH_SIZE; "
              "several, comma-separated, profile each into the directory --out.")
@click.option("--batch-arg", metavar="NAME", help="The script's option for its per-worker batch, e.g. "
              "--batch-arg=--per_device_train_batch_size: each worker appends 'NAME N' to the script's arguments.")
@click.option("--pass-batch-arg", is_flag=True, help="The same as --batch-arg=--batch-size.")
@click.option("--max-seconds", type=params.positive(), default=request_defaults.MAX_SECONDS, show_default=True, help="Cap on measuring time (after start-up).")
@click.option("--max-iterations", type=params.whole(), default=request_defaults.MAX_ITERATIONS, show_default=True, help="Cap on measured iterations.")
@click.option("--min-iterations", type=params.whole(), default=request_defaults.MIN_ITERATIONS, show_default=True, help="Steady iterations needed before stopping.")
@click.option("--target-ci", type=params.fraction(), default=request_defaults.TARGET_REL_CI, show_default=True,
              help="Stop when the median iteration time's 95%% CI half-width is below this fraction.")
@click.option("--hang-timeout", type=params.positive(), default=120.0, show_default=True,
              help="Seconds without a finished iteration before the workers count as hung.")
@click.option("--startup-timeout", type=params.positive(), default=180.0, show_default=True,
              help="Seconds allowed before the first iteration finishes.")
@click.option("--backend", default="local", show_default=True,
              help="Where workers run: local (this machine) or emulated (namespaced hosts, needs root).")
@click.option("--hosts", help="With --backend emulated: host types and counts, e.g. emu.medium:2,emu.small:1.")
@click.option("--spec", default="configs/emulated.yaml", show_default=True, type=click.Path(dir_okay=False),
              help="With --backend emulated: the emulated instance catalog.")
@click.option("--instance-type", default="local", show_default=True, help="Instance type label recorded in the profile.")
@click.option("--model-name", help="Model name recorded in the profile (default: the script's file name).")
@click.option("--device", type=click.Choice(["auto", "cpu"]), default="auto", show_default=True,
              help="'cpu' forces CPU workers even where a GPU exists.")
@click.option("--collectives", is_flag=True, help="Run the allreduce microbenchmark instead of a script.")
@click.option("--world-sizes", default="", help="With --collectives: comma-separated world sizes (default: --nproc).")
@click.option("--max-bytes", type=params.whole(), default=64 * 1024 * 1024, show_default=True, help="With --collectives: largest message.")
@click.option("--repeats", type=params.whole(), default=10, show_default=True, help="With --collectives: timed repeats per size.")
@click.option("--out", "-o", type=click.Path(), help="Profile file to write (default: <model>.profile.json); with "
              "several batch sizes, a directory (default: <model>/).")
@click.option("--json", "as_json", is_flag=True, help="Print the profile's summary as JSON on stdout.")
@click.option("--dry-run", is_flag=True, help="Print the commands that would run, and run nothing.")
@click.option("--instance-types", default="", help="With --backend ec2: comma-separated EC2 types, profiled in parallel.")
@click.option("--spot", is_flag=True, help="With --backend ec2: spot instances (a lost run is retried once on-demand).")
@click.option("--nodes", type=params.NODES, default=1, show_default=True, help="With --backend ec2: instances per type (c10d rendezvous).")
@click.option("--placement-group", is_flag=True, help="With --backend ec2: launch the nodes into a cluster placement group "
              "of the run (10 Gbit/s per TCP flow between them instead of 5), deleted afterwards.")
@click.option("--subnet-ids", default="", help="With --backend ec2: comma-separated subnets to launch into, one per zone, "
              "tried in turn for capacity (default: ec2.subnet_ids in the config file, else the default VPC's).")
@click.option("--security-group-ids", default="", help="With --backend ec2: comma-separated security groups of the "
              "instances; they must allow all TCP between their members (default: ec2.security_group_ids in the config "
              "file, else the VPC's default group).")
@click.option("--region", help="With --backend ec2: AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).")
@click.option("--max-cost", type=params.non_negative(), help="With --backend ec2: refuse to launch when the estimated worst-case cost (USD) is above this "
              "(default: ec2.max_cost in ~/.config/srifty/config.yaml); below it, a run off a terminal needs no --yes.")
@click.option("--s3-uri", help="With --backend ec2: s3://bucket/prefix for inputs and profiles (default: a private srifty bucket).")
@click.option("--ami", help="With --backend ec2: AMI id (default: newest AWS Deep Learning AMI with PyTorch).")
@click.option("--instance-profile", help="With --backend ec2: IAM instance profile that lets the instances use the S3 prefix.")
@click.option("--time-cap", type=params.positive(), help="With --backend ec2: seconds after boot before an instance is terminated "
              "(default: startup + max + hang timeouts).")
@click.option("--requirements", type=click.Path(dir_okay=False, exists=True),
              help="With --backend ec2: requirements file to install (default: requirements.txt next to SCRIPT, "
              "else at the project root).")
@click.option("--yes", "-y", is_flag=True, help="With --backend ec2: launch without asking to confirm the estimated cost.")
@click.pass_obj
def profile_cmd(
    obj: Context,
    script: str | None,
    script_args: tuple[str, ...],
    module: str | None,
    nproc: int,
    batch_sizes: str | None,
    batch_arg: str | None,
    pass_batch_arg: bool,
    max_seconds: float,
    max_iterations: int,
    min_iterations: int,
    target_ci: float,
    hang_timeout: float,
    startup_timeout: float,
    backend: str,
    hosts: str | None,
    spec: str,
    instance_type: str,
    model_name: str | None,
    device: str,
    collectives: bool,
    world_sizes: str,
    max_bytes: int,
    repeats: int,
    out: str | None,
    as_json: bool,
    dry_run: bool,
    instance_types: str = "",
    spot: bool = False,
    nodes: int = 1,
    placement_group: bool = False,
    subnet_ids: str = "",
    security_group_ids: str = "",
    region: str | None = None,
    max_cost: float | None = None,
    s3_uri: str | None = None,
    ami: str | None = None,
    instance_profile: str | None = None,
    time_cap: float | None = None,
    requirements: str | None = None,
    yes: bool = False,
) -> None:
    """Measure a real DDP training script (or the allreduce microbenchmark) and write a profile."""
    from srifty import api, report
    from srifty.profiling.ec2.config import aws_ids
    from srifty.profiling.launcher import ProfileRequest, get_backend
    from srifty.profiling.request import module_file

    batches = _batch_sizes(batch_sizes)
    try:
        sizes = [int(x) for x in world_sizes.split(",") if x.strip()]
    except ValueError:
        raise SriftyError(f"--world-sizes takes comma-separated integers such as 2,4 (got {world_sizes!r}).") from None
    if collectives and (script or module):
        raise SriftyError("--collectives runs srifty's own benchmark: give no SCRIPT or --module with it.")
    if module:  # what click took for a SCRIPT is the module's first argument
        script_args = (script, *script_args) if script else script_args
        script = module_file(module)
    if pass_batch_arg and batch_arg not in (None, "--batch-size"):
        raise SriftyError(f"--pass-batch-arg appends --batch-size, and --batch-arg {batch_arg} another option.",
                          "Give one of them.")
    batch_arg = "--batch-size" if pass_batch_arg else batch_arg
    if placement_group and backend != "ec2":
        raise SriftyError("--placement-group places EC2 instances: it needs --backend ec2.")
    if (subnet_ids or security_group_ids) and backend != "ec2":
        raise SriftyError("--subnet-ids and --security-group-ids place EC2 instances: they need --backend ec2.")
    if len(batches) > 1 and (collectives or backend == "ec2"):
        raise SriftyError("Several --batch-size values are for training scripts on the local or emulated backend.",
                          "Run one `srifty profile` per batch size with --backend ec2 (each launches instances).")

    def request_for(batch_size: int | None) -> ProfileRequest:
        from srifty.commands.ec2 import launch_prompt

        return ProfileRequest(
            script=script, script_args=list(script_args), module=module, nproc=nproc, batch_size=batch_size,
            batch_arg=batch_arg,
            max_seconds=max_seconds, max_iterations=max_iterations, min_iterations=min_iterations, target_rel_ci=target_ci,
            hang_timeout=hang_timeout, startup_timeout=startup_timeout, model_name=model_name,
            instance_type=instance_type, device=device, collectives=collectives, world_sizes=sizes,
            max_bytes=max_bytes, repeats=repeats, hosts=hosts, spec=spec,
            instance_types=[t.strip() for t in instance_types.split(",") if t.strip()], spot=spot, nodes=nodes,
            placement_group=placement_group,
            subnet_ids=list(aws_ids(subnet_ids, "subnet", "--subnet-ids")),
            security_group_ids=list(aws_ids(security_group_ids, "sg", "--security-group-ids")),
            region=region, max_cost=max_cost, s3_uri=s3_uri, ami=ami, instance_profile=instance_profile,
            time_cap=time_cap, requirements=requirements,
            yes=yes, confirm=launch_prompt() if backend == "ec2" else None,
        )

    requests = [request_for(b) for b in batches]
    if hosts and backend != "emulated":
        raise SriftyError("--hosts is for --backend emulated.", "Add --backend emulated, or drop --hosts.")
    chosen = get_backend(backend)
    if dry_run:
        click.echo("\n".join(chosen.dry_run(r) for r in requests))
        return
    outs = api.profile_outputs(requests, out, (hosts or instance_type).replace(",", "+").replace(":", "x"))
    profiles = api.profile_batches(requests, outs, backend, _progress_reporter, say=lambda m: click.echo(m, err=True))
    summaries = [report.profile_summary(p) for p in profiles]
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else {"schema": 1, "profiles": summaries}, indent=1))
        return
    _console().print(report.render_profiles(summaries))
    for summary in summaries:
        for w in summary.get("warnings") or []:
            click.echo(f"warning: {w}", err=True)
    if len(requests) > 1:
        click.echo(f"profiles written to {Path(outs[0]).parent}/ (one per batch size; give the directory to "
                   "--profile)", err=True)
    else:
        click.echo(f"profile{'s' if len(profiles) > 1 else ''} written to {', '.join(str(p.path) for p in profiles)}",
                   err=True)


def _batch_sizes(text: str | None) -> list[int | None]:
    """--batch-size: none (the script's default), one, or several comma-separated sizes."""
    if not text:
        return [None]
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SriftyError(f"--batch-size takes a positive integer or several, comma-separated, such as 32,128 "
                          f"(got {text!r}).") from None
    if not sizes or any(b < 1 for b in sizes):
        raise SriftyError(f"--batch-size must be a positive number of samples per worker (got {text!r}).")
    if len(set(sizes)) != len(sizes):
        raise SriftyError(f"--batch-size lists a size twice ({text!r}).", "Give each batch size once.")
    return list(sizes)


def _progress_reporter(request: Any) -> tuple[Any, Any]:
    """A rich progress bar on a terminal; nothing when stderr is not a TTY."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                   TimeElapsedColumn(), transient=True)
    total = float(request.max_iterations if request.collectives else request.min_iterations)
    task = bar.add_task("profiling", total=total, info="starting workers")

    def update(state: dict[str, Any]) -> None:
        if not bar.live.is_started:  # drawn from the first report on: the EC2 backend's cost question comes first
            bar.start()
        n = state.get("iterations", 0)
        if request.collectives:
            bar.update(task, completed=n, total=None, info=f"world size {state.get('world_size')}: {n} message sizes")
            return
        ci = state.get("rel_ci")
        info = f"{n} iterations" + (f", median known to ±{ci:.1%} (target {request.target_rel_ci:.0%})" if ci else "")
        bar.update(task, completed=min(n, total), info=info)

    return update, bar.stop


@cli.command("show")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON (one document).")
def show_cmd(paths: tuple[str, ...], as_json: bool) -> None:
    """Validate profiles and summarise them (files or directories of profiles).

    \b
    Examples:
      srifty show profiles/local/cnn_resnet.json
      srifty show profiles/local --json
    """
    from srifty import profile as profile_mod
    from srifty import report

    summaries = report.in_batch_order([report.profile_summary(p) for p in profile_mod.load_many(list(paths))])
    if as_json:
        click.echo(json.dumps({"schema": 1, "profiles": summaries}, indent=1))
        return
    _console().print(report.render_profiles(summaries))
    for s in summaries:
        if s["status"] == "partial":
            click.echo(f"note: {s['path']} is partial: {s['partial_reason']}", err=True)
        for warning in s.get("warnings") or ():  # what the profiler said when it wrote the profile
            click.echo(f"warning: {s['path']}: {warning}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning srifty's errors into one clear paragraph."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        with terminate_as_interrupt():
            cli.main(args=args, prog_name="srifty", standalone_mode=False)
    except click.exceptions.Abort as exc:  # click turns a Ctrl-C (or Terminated) inside a command into Abort
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, KeyboardInterrupt):
            exit_interrupted(cause)
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SriftyError as exc:
        if debug:
            traceback.print_exc()
            partial = getattr(exc, "partial_path", None)
            if partial:
                click.echo(f"(partial profile: {partial})", err=True)
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (Terminated): clean-up has run
        exit_interrupted(exc)
    except Exception as exc:  # a bug in srifty: say so plainly
        if debug:
            traceback.print_exc()
        click.echo(
            f"Error: srifty failed unexpectedly ({type(exc).__name__}: {exc}). "
            "Re-run with --debug for the traceback and please report it.",
            err=True,
        )
        sys.exit(1)
