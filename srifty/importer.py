"""Import external measurements (a CSV trace) as srifty profiles.

The trace has one row per measured run::

    model, instance_type, placement, local_batch_size, step_time_s
    [, sync_time_s, param_count, grad_bytes, precision, conv_flop_share]

``placement`` lists the workers on each node joined by ``+`` (``4+4``, ``1+1+1+3``).
Every (model, instance type) becomes one profile document, ``DIR/<model>/<instance_type>.json``:
a schema-1 profile with ``stop_reason: "imported"`` whose ``summary`` describes the
reference run (the single-worker run at the largest batch when there is one) and whose
optional ``runs`` array holds every measured run (see docs/latency-model.md).

Rows that cannot be read are never dropped silently: :func:`read_trace` raises one
:class:`TraceError` listing every bad line, or with ``skip_bad=True`` returns them in
:attr:`Trace.bad_rows` so that the caller reports them.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from srifty import __version__
from srifty.errors import SriftyError

REQUIRED_COLUMNS = ("model", "instance_type", "placement", "local_batch_size", "step_time_s")
OPTIONAL_COLUMNS = ("sync_time_s", "param_count", "grad_bytes", "precision", "conv_flop_share")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class TraceError(SriftyError):
    """A trace file that cannot be imported as it is."""


@dataclass(frozen=True)
class TraceRow:
    line: int
    model: str
    instance_type: str
    workers_per_node: tuple[int, ...]
    local_batch_size: int
    step_time_s: float
    sync_time_s: float | None = None
    param_count: int | None = None
    grad_bytes: int | None = None
    precision: str | None = None
    conv_flop_share: float | None = None  # share of the forward FLOPs in convolutions

    @property
    def world_size(self) -> int:
        return sum(self.workers_per_node)


@dataclass
class Trace:
    path: str
    sha256: str
    rows: list[TraceRow] = field(default_factory=list)
    bad_rows: list[tuple[int, str]] = field(default_factory=list)


def parse_placement(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in str(text).strip().split("+")]
    if not parts or any(not p.isdigit() or int(p) < 1 for p in parts):
        raise ValueError(f"placement {text!r} is not workers per node joined by '+' (e.g. 4+4)")
    return tuple(int(p) for p in parts)


def _opt_float(value: str, name: str) -> float | None:
    if value is None or str(value).strip() == "":
        return None
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return x


def _opt_int(value: str, name: str) -> int | None:
    x = _opt_float(value, name)
    if x is None:
        return None
    if x != int(x):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(x)


def _parse_row(line: int, rec: dict[str, str]) -> TraceRow:
    model = (rec.get("model") or "").strip()
    itype = (rec.get("instance_type") or "").strip()
    if not _SAFE_NAME.match(model):
        raise ValueError(f"model {model!r} must be a non-empty name of letters, digits, '.', '_' or '-'")
    if not _SAFE_NAME.match(itype):
        raise ValueError(f"instance_type {itype!r} must be a non-empty name such as g4dn.12xlarge")
    wpn = parse_placement(rec.get("placement") or "")
    bsz = _opt_int(rec.get("local_batch_size") or "", "local_batch_size")
    if bsz is None or bsz < 1:
        raise ValueError(f"local_batch_size must be a whole number >= 1, got {rec.get('local_batch_size')!r}")
    step = _opt_float(rec.get("step_time_s") or "", "step_time_s")
    if step is None or step <= 0:
        raise ValueError(f"step_time_s must be a number > 0, got {rec.get('step_time_s')!r}")
    sync = _opt_float(rec.get("sync_time_s") or "", "sync_time_s")
    if sync is not None and sync > step:
        raise ValueError(f"sync_time_s ({sync}) exceeds step_time_s ({step})")
    precision = (rec.get("precision") or "").strip() or None
    conv = _opt_float(rec.get("conv_flop_share") or "", "conv_flop_share")
    if conv is not None and not 0.0 <= conv <= 1.0:
        raise ValueError(f"conv_flop_share must be a share between 0 and 1, got {conv}")
    return TraceRow(line, model, itype, wpn, bsz, step, sync, _opt_int(rec.get("param_count") or "", "param_count"),
                    _opt_int(rec.get("grad_bytes") or "", "grad_bytes"), precision, conv)


def read_trace(path: str | Path, skip_bad: bool = False,
               slots: Callable[[str], int | None] = lambda instance_type: None) -> Trace:
    """Read and check a trace CSV; bad rows raise one error listing them (or are returned with skip_bad).

    ``slots(instance_type)``: the GPUs (worker slots) a node of that type has, where known; a
    placement that puts more workers on one node is a bad row."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TraceError(f"Cannot read the trace {p}: {exc.strerror}.", "Check the path.") from None
    text = data.decode("utf-8-sig", errors="replace")
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(
            f"{p}: the trace lacks the column(s) {', '.join(missing)} (it has: {', '.join(header) or 'none'}).",
            f"Required: {', '.join(REQUIRED_COLUMNS)}; optional: {', '.join(OPTIONAL_COLUMNS)}.",
        )
    reader.fieldnames = header
    trace = Trace(str(p), hashlib.sha256(data).hexdigest())
    for i, rec in enumerate(reader, start=2):
        if all(not (v or "").strip() for k, v in rec.items() if k is not None):
            continue  # blank line
        try:
            row = _parse_row(i, rec)
            most = slots(row.instance_type)
            if most is not None and max(row.workers_per_node) > most:
                raise ValueError(f"placement {rec.get('placement')!r} puts {max(row.workers_per_node)} workers on a "
                                 f"node of {row.instance_type}, which has {most} GPU(s)")
            trace.rows.append(row)
        except (ValueError, TypeError) as exc:
            trace.bad_rows.append((i, str(exc)))
    if trace.bad_rows and not skip_bad:
        listed = "; ".join(f"line {n}: {why}" for n, why in trace.bad_rows[:20])
        more = f" (and {len(trace.bad_rows) - 20} more)" if len(trace.bad_rows) > 20 else ""
        raise TraceError(f"{p}: {len(trace.bad_rows)} bad row(s): {listed}{more}.",
                         "Fix them, or pass --skip-bad to import the rest (the bad rows are still listed).")
    if not trace.rows:
        raise TraceError(f"{p}: no importable rows.", "The trace needs at least one measured run.")
    return trace


def _point_stat(value: float) -> dict[str, Any]:
    return {"median": value, "p10": value, "p90": value, "mean": value, "n": 1, "ci_low": value, "ci_high": value}


def _consistent(rows: list[TraceRow], attr: str, group: str) -> Any:
    values = {getattr(r, attr) for r in rows if getattr(r, attr) is not None}
    if len(values) > 1:
        lines = sorted({r.line for r in rows if getattr(r, attr) is not None})[:10]
        raise TraceError(f"{group}: rows disagree on {attr} ({', '.join(map(str, sorted(values)))}; lines {lines}).",
                         f"One model has one {attr}: fix the trace.")
    return next(iter(values), None)


def _by_model_and_type(rows: Sequence[TraceRow]) -> dict[tuple[str, str], list[TraceRow]]:
    """The rows of each (model, instance type): one profile each."""
    groups: dict[tuple[str, str], list[TraceRow]] = defaultdict(list)
    for r in rows:
        groups[(r.model, r.instance_type)].append(r)
    return groups


def profile_path(out_dir: str | Path, model: str, instance_type: str) -> Path:
    """Where the profile of ``model`` on ``instance_type`` is imported to: ``out_dir/<model>/<type>.json``."""
    return Path(out_dir) / model / f"{instance_type}.json"


def build_profiles(trace: Trace) -> dict[tuple[str, str], dict[str, Any]]:
    """One schema-1 profile document per (model, instance type) of the trace."""
    from srifty.profile import utc_now

    groups = _by_model_and_type(trace.rows)
    out = {}
    for (model, itype), rows in sorted(groups.items()):
        name = f"{model} on {itype}"
        param_count = _consistent(rows, "param_count", name)
        grad_bytes = _consistent(rows, "grad_bytes", name)
        precision = _consistent(rows, "precision", name)
        conv_flop_share = _consistent(rows, "conv_flop_share", name)
        single = [r for r in rows if r.world_size == 1]
        ref = max(single, key=lambda r: (r.local_batch_size, -r.line)) if single else \
            min(rows, key=lambda r: (r.world_size, -r.local_batch_size, r.line))
        step_ms = ref.step_time_s * 1e3
        sync_ms = (ref.sync_time_s or 0.0) * 1e3
        zero = _point_stat(0.0)
        summary = {
            "iteration_ms": _point_stat(step_ms), "forward_ms": zero, "backward_ms": zero,
            "backward_compute_ms": zero, "exposed_comm_ms": _point_stat(sync_ms), "optimizer_ms": zero,
            "other_ms": _point_stat(max(step_ms - sync_ms, 0.0)),
            "sync_ms": _point_stat(sync_ms) if ref.sync_time_s is not None else None,
            "throughput_samples_per_s": ref.world_size * ref.local_batch_size / ref.step_time_s,
            "buckets": [],
        }
        runs = [
            {"workers_per_node": list(r.workers_per_node), "local_batch_size": r.local_batch_size,
             "step_time_ms": r.step_time_s * 1e3,
             "sync_time_ms": None if r.sync_time_s is None else r.sync_time_s * 1e3, "line": r.line}
            for r in sorted(rows, key=lambda r: (r.world_size, len(r.workers_per_node), r.workers_per_node,
                                                 r.local_batch_size, r.line))
        ]
        device = "cpu" if itype.startswith("emu.") else "cuda"
        doc = {
            "schema_version": 1, "kind": "training", "status": "complete", "stop_reason": "imported",
            "partial_reason": None, "created_at": utc_now(), "srifty_version": __version__,
            "job": {"model": model, "script": None, "script_sha256": None, "args": [],
                    "local_batch_size": ref.local_batch_size, "requested_batch_size": None,
                    "param_count": param_count, "grad_bytes": grad_bytes,
                    "grad_dtype": None, "precision": precision, "conv_flop_share": conv_flop_share,
                    "bucket_cap_mb": None, "buckets": []},
            "cluster": {"launcher": "imported", "backend": "unknown", "device": device,
                        "world_size": ref.world_size, "nodes": len(ref.workers_per_node),
                        "workers_per_node": list(ref.workers_per_node), "instance_types": [itype],
                        "hosts": [{"name": f"node{i}", "instance_type": itype, "workers": w}
                                  for i, w in enumerate(ref.workers_per_node)]},
            "environment": {"python": "unknown", "torch": None, "srifty": __version__},
            "measurement": {"target_rel_ci": 1.0, "iterations_used": 1},
            "summary": summary, "ranks": [], "runs": runs,
            "import": {"source": Path(trace.path).name, "sha256": trace.sha256, "rows": len(rows)},
            "warnings": [
                f"Imported from {Path(trace.path).name} (sha256 {trace.sha256[:12]}): {len(rows)} measured run(s) in "
                "`runs`. The trace gives step (and sync) times only: forward/backward/optimizer are recorded as 0 "
                "and other_ms holds step - sync time of the reference run."
            ],
        }
        if not gradient_size_known(rows, param_count, grad_bytes):
            doc["warnings"].append(unknown_gradient_note(model, itype))
        elif not overlap_readable(rows):
            doc["warnings"].append(no_sync_note(model, itype))
        out[(model, itype)] = doc
    return out


def gradient_size_known(rows: Sequence[TraceRow], param_count: int | None, grad_bytes: int | None) -> bool:
    """Whether srifty can size this job's gradients: stated, or readable off the sync times of its
    runs with several workers on one node (srifty.features.overlap.estimate_gradient_size)."""
    return bool(param_count or grad_bytes) or any(
        len(r.workers_per_node) == 1 and r.world_size > 1 and r.sync_time_s is not None for r in rows)


def unknown_gradient_note(model: str, itype: str) -> str:
    return (f"{model} on {itype}: no param_count or grad_bytes, and no single-node multi-worker row with "
            "sync_time_s to infer them from, so srifty cannot simulate its communication: predictions for several "
            "workers are its compute alone with an interval as wide as the training corpus's slowdowns. Add a "
            "param_count column value for this model to get real estimates.")


def overlap_readable(rows: Sequence[TraceRow]) -> bool:
    """Whether the overlap of one model's rows on one type can be read (srifty.features.overlap):
    no row has several workers, or one that has states its sync time, or its batch lies within
    the single-worker rows' (its step less theirs is then its sync time)."""
    multi = [r for r in rows if r.world_size > 1]
    single = [r.local_batch_size for r in rows if r.world_size == 1]
    return not multi or any(r.sync_time_s is not None or (single and min(single) <= r.local_batch_size <= max(single))
                            for r in multi)


def no_sync_note(model: str, itype: str) -> str:
    return (f"{model} on {itype}: its rows with several workers have no sync_time_s, and no single-worker row at "
            "their batch sizes to compare them with, so srifty cannot tell how much of the allreduce backward hides: "
            "predictions let it hide as DDP's buckets usually allow, and their interval reaches none of it hidden. "
            "Add each run's sync_time_s (the step's wait on the allreduce beyond its compute), or single-worker rows "
            "at the same batch sizes, and srifty reads the overlap off them (docs/latency-model.md, section 4).")


@dataclass
class ImportResult:
    written: list[str]
    rows: int
    bad_rows: list[tuple[int, str]]
    notes: list[str] = field(default_factory=list)  # what the written profiles cannot support
    merged: list[str] = field(default_factory=list)  # profiles that already held runs, now with the new ones too


def _earlier_rows(doc: dict[str, Any]) -> list[TraceRow]:
    """The runs of an imported profile, as trace rows to import again with new ones."""
    job = doc.get("job") or {}
    model, itype = job.get("model"), doc["cluster"]["instance_types"][0]
    return [TraceRow(int(r.get("line") or 1), model, itype, tuple(r["workers_per_node"]), int(r["local_batch_size"]),
                     float(r["step_time_ms"]) / 1e3,
                     None if r.get("sync_time_ms") is None else float(r["sync_time_ms"]) / 1e3,
                     job.get("param_count"), job.get("grad_bytes"), job.get("precision"), job.get("conv_flop_share"))
            for r in doc.get("runs") or []]


def _same_run(r: TraceRow) -> tuple[Any, ...]:
    return (r.workers_per_node, r.local_batch_size, round(r.step_time_s, 9),
            None if r.sync_time_s is None else round(r.sync_time_s, 9))


def import_trace(path: str | Path, out_dir: str | Path, skip_bad: bool = False, replace: bool = False,
                 slots: Callable[[str], int | None] = lambda instance_type: None) -> ImportResult:
    """Read ``path`` and write ``out_dir/<model>/<instance_type>.json`` for every group.

    A profile already there that was imported gets the new runs added to its own (a run measured
    twice, same placement, batch and times, is kept once), unless ``replace``; a profile that
    ``srifty profile`` recorded is never replaced without ``replace``. Nothing is written until
    every group has been checked."""
    from srifty import profile as profile_mod

    trace = read_trace(path, skip_bad=skip_bad, slots=slots)
    source = Path(path).resolve()
    groups = _by_model_and_type(trace.rows)
    earlier: dict[tuple[str, str], dict[str, Any]] = {}
    for key in groups:
        target = profile_path(out_dir, *key)
        if target.resolve() == source:
            raise TraceError(f"Importing {path} would write {target}, the trace itself. Nothing was written.",
                             "Give --out another directory.")
        if not target.exists() or replace:
            continue
        old = profile_mod.load(target).doc
        if old.get("stop_reason") != "imported":
            raise TraceError(f"{target} holds a profile that `srifty profile` recorded ({key[0]} on {key[1]}); "
                             "importing would replace it. Nothing was written.",
                             "Give --out another directory, or pass --replace to replace it.")
        earlier[key] = old
    merged_rows: list[TraceRow] = []
    for key, rows in groups.items():
        before = _earlier_rows(earlier[key]) if key in earlier else []
        have = {_same_run(r) for r in before}
        merged_rows += before + [r for r in rows if _same_run(r) not in have]
    combined = Trace(trace.path, trace.sha256, merged_rows, trace.bad_rows)
    docs = build_profiles(combined)
    written, notes, merged = [], [], []
    for (model, itype), doc in docs.items():
        target = profile_path(out_dir, model, itype)
        if (model, itype) in earlier:
            before = earlier[(model, itype)].get("import") or {}
            doc["import"]["earlier"] = [*(before.get("earlier") or []),
                                        {k: before.get(k) for k in ("source", "sha256", "rows")}]
            doc["warnings"].append(f"Runs merged with the {len(earlier[(model, itype)].get('runs') or [])} imported "
                                   f"before from {before.get('source')}: {len(doc['runs'])} in all.")
            merged.append(str(target))
        profile_mod.save(doc, target)
        written.append(str(target))
        notes += [n for n in (unknown_gradient_note(model, itype), no_sync_note(model, itype)) if n in doc["warnings"]]
    return ImportResult(written, len(trace.rows), trace.bad_rows, notes, merged)
