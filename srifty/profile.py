"""The profile: what srifty measured about one job on one cluster configuration.

A profile is a JSON document (schema version 2, ``srifty/schemas/profile-v2.schema.json``,
documented in ``docs/profile-format.md``; version 1, without the operator count, still reads). This module builds profiles from the records
the workers flush, writes them atomically, and loads them back with validation that
names the offending field. It imports no torch: summaries and the CLI stay fast.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from srifty import __version__, stats
from srifty.errors import ProfileFormatError
from srifty.outputs import atomic_write_text  # re-exported: the profile's own writer

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)  # version 2 added job.operators (srifty.profiling.opcount)
# the iteration whose operators the recorder counts (srifty.profiling.instrument): the second,
# after the first one's lazy set-up; the count slows it, so the warm-up always drops it
COUNTED_ITERATION = 1
FIRST_TIMED_ITERATION = COUNTED_ITERATION + 1
COMPONENTS = ("forward_ms", "backward_ms", "backward_compute_ms", "exposed_comm_ms", "optimizer_ms", "other_ms",
              "input_ms")


@lru_cache(maxsize=2)
def schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The JSON Schema of profile documents of ``version``."""
    text = resources.files("srifty").joinpath(f"schemas/profile-v{version}.schema.json").read_text()
    return json.loads(text)


@lru_cache(maxsize=2)
def _validator(version: int) -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(schema(version))


# The digests of profile files this process has read and found valid: the same bytes are the same
# document, so a corpus read again (each fold of `srifty validate` reads it) skips the schema walk,
# which costs more than the parse. Only bytes that passed are kept; a broken file fails every time.
_VALID_BYTES: set[bytes] = set()
NOT_A_PROFILE_HINT = "Give a JSON file written by `srifty profile` or `srifty import`."


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _field_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def validate(doc: Any, source: str = "profile") -> None:
    """Raise :class:`ProfileFormatError` naming the first wrong field of ``doc``."""
    if not isinstance(doc, dict):
        raise ProfileFormatError(f"{source}: a profile is a JSON object, not {type(doc).__name__}.")
    if "schema_version" not in doc:
        raise ProfileFormatError(f"{source}: not a srifty profile (it has no `schema_version` field).",
                                 NOT_A_PROFILE_HINT)
    version = doc.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS or isinstance(version, bool):
        raise ProfileFormatError(
            f"{source}: field `schema_version` is {version!r}, but this srifty ({__version__}) reads "
            f"schema versions {' and '.join(map(str, READABLE_SCHEMA_VERSIONS))}.",
            "Re-record the profile with this version of `srifty profile`, or use the srifty that wrote it.",
        )
    import jsonschema

    errors = sorted(_validator(version).iter_errors(doc),
                    key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise ProfileFormatError(
            f"{source}: field `{_field_path(err.absolute_path)}` is invalid: {err.message}.",
            f"See docs/profile-format.md for the format ({len(errors)} problem(s) in all).",
        )


def save(doc: dict[str, Any], path: str | os.PathLike[str], check: bool = True) -> None:
    """Validate (unless ``check`` is false) and write a profile atomically."""
    if check:
        validate(doc, str(path))
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")


@dataclass(frozen=True)
class Profile:
    """A validated profile document with typed access to what downstream stages use."""

    doc: dict[str, Any]
    path: str | None = None

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def status(self) -> str:
        return str(self.doc["status"])

    @property
    def is_partial(self) -> bool:
        return self.status == "partial"

    @property
    def model(self) -> str:
        return str((self.doc.get("job") or {}).get("model") or "collectives")

    @property
    def instance_types(self) -> list[str]:
        return list(self.doc["cluster"]["instance_types"])

    @property
    def world_size(self) -> int:
        return int(self.doc["cluster"]["world_size"])

    @property
    def nodes(self) -> int:
        return int(self.doc["cluster"]["nodes"])

    @property
    def local_batch_size(self) -> int | None:
        job = self.doc.get("job") or {}
        return job.get("local_batch_size")

    def stat(self, name: str) -> stats.Summary | None:
        summary = self.doc.get("summary") or {}
        raw = summary.get(name)
        return stats.Summary(**raw) if raw else None

    @property
    def iteration(self) -> stats.Summary | None:
        return self.stat("iteration_ms")

    @property
    def throughput(self) -> float | None:
        summary = self.doc.get("summary") or {}
        return summary.get("throughput_samples_per_s")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not a measurement (JSON has no NaN or infinities)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"holds {text}, too large to be a measurement")
    return x


def _read(p: Path) -> tuple[bytes, Any]:
    """The bytes of the file at ``p`` and its JSON document, or a one-paragraph error."""
    try:
        raw = p.read_bytes()
        return raw, json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float)
    except OSError as exc:
        raise ProfileFormatError(f"{p}: cannot be read ({exc.strerror}).", "Check the path and its permissions.") from None
    except UnicodeDecodeError:
        raise ProfileFormatError(f"{p}: not a profile (not UTF-8 text).", NOT_A_PROFILE_HINT) from None
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(
            f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).",
            "The file may be truncated or hand-edited; re-record it with `srifty profile`.",
        ) from None
    except ValueError as exc:  # NaN or an infinity, which JSON does not have
        raise ProfileFormatError(f"{p}: {exc}.", "Every figure in a profile is a finite number; re-record it.") from None


def _validated(p: Path, raw: bytes, doc: Any) -> Profile:
    digest = hashlib.sha256(raw).digest()
    if digest not in _VALID_BYTES:
        validate(doc, str(p))
        _VALID_BYTES.add(digest)
    return Profile(doc=doc, path=str(p))


def load(path: str | os.PathLike[str]) -> Profile:
    """Load and validate one profile file."""
    p = Path(path)
    if not p.exists():
        raise ProfileFormatError(f"{p}: no such profile file.", "Check the path, or record one with `srifty profile`.")
    return _validated(p, *_read(p))


def load_many(paths: Sequence[str | os.PathLike[str]]) -> list[Profile]:
    """Load profile files, expanding directories to the profiles below them: their ``*.json``
    files, but not hidden ones, not partial runs kept beside a complete profile (read only when
    named) and not JSON that is no profile at all (no ``schema_version``: the emulated cluster's
    calibration record, a note of the user's). A broken profile fails loudly wherever it is."""
    out: list[Profile] = []
    for raw_path in paths:
        p = Path(raw_path)
        if not p.is_dir():
            out.append(load(p))
            continue
        found = []
        for q in sorted(q for q in p.rglob("*.json") if not q.name.startswith(".")
                        and not q.name.endswith(PARTIAL_SUFFIX)):
            raw, doc = _read(q)
            if isinstance(doc, dict) and "schema_version" not in doc:
                continue
            found.append(_validated(q, raw, doc))
        if not found:
            raise ProfileFormatError(f"{p}: directory holds no profile (a *.json file written by `srifty profile` "
                                     "or `srifty import`).", "Give the directory the profiles were written to.")
        out.extend(found)
    return out


# ----- building profiles from worker records -------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def merge_iterations(ranks: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """Per-iteration view across ranks: rank 0's wall time, components averaged over ranks.

    Ranks run in lockstep (every iteration ends with the same allreduces), so iteration
    ``i`` of every rank is the same training step and lasts as long on each rank, up to
    where each rank's clock marks the boundary; rank 0's series is the one its stopping
    rule judged. Only iterations that every rank completed are kept.
    """
    series = [r.get("iterations") or [] for r in ranks]
    if not series or not all(series):
        return []
    n = min(len(s) for s in series)
    merged = []
    for i in range(n):
        its = [s[i] for s in series]
        row = {"index": i, "wall_ms": its[0]["wall_ms"]}
        for c in COMPONENTS:
            row[c] = _mean([it.get(c, 0.0) for it in its])
        merged.append(row)
    return merged


def summarise_buckets(ranks: Sequence[dict[str, Any]], first: int) -> list[dict[str, Any]]:
    """Median ready time, end time and allreduce duration of each bucket after warm-up."""
    per_bucket: dict[int, dict[str, Any]] = {}
    for r in ranks:
        for it in (r.get("iterations") or [])[first:]:
            for b in it.get("buckets") or []:
                slot = per_bucket.setdefault(b["index"], {"bytes": b["bytes"], "ready": [], "end": [], "dur": []})
                if b.get("ready_ms") is not None:
                    slot["ready"].append(b["ready_ms"])
                if b.get("end_ms") is not None:
                    slot["end"].append(b["end_ms"])
                    if b.get("ready_ms") is not None:
                        slot["dur"].append(b["end_ms"] - b["ready_ms"])
    out = []
    for idx in sorted(per_bucket):
        slot = per_bucket[idx]
        out.append(
            {
                "index": idx,
                "bytes": int(slot["bytes"]),
                "ready_ms": stats.median(slot["ready"]) if slot["ready"] else None,
                "end_ms": stats.median(slot["end"]) if slot["end"] else None,
                "allreduce_ms": stats.median(slot["dur"]) if slot["dur"] else None,
            }
        )
    return out


def step_passes(forwards: int, backwards: int, steps: int) -> int | None:
    """The forward-backward passes of an iteration of one optimizer step and one backward per
    forward (more than one: it accumulates gradients); None for any other shape (a model called
    twice a step runs more forwards than backwards, a GAN's several models step more than once)."""
    return backwards if steps == 1 and forwards == backwards >= 1 else None


def summarise_training(
    ranks: Sequence[dict[str, Any]], world_size: int, local_batch_size: int | None
) -> tuple[dict[str, Any] | None, int, float | None]:
    """Summary block, number of warm-up iterations dropped, achieved relative CI."""
    ranks = sorted(ranks, key=lambda r: r.get("rank", 0))
    merged = merge_iterations(ranks)
    if not merged:
        return None, 0, None
    walls = [m["wall_ms"] for m in merged]
    decided = ranks[0].get("current_warmup")  # the warm-up rank 0's stopping rule used
    warmup = decided if decided is not None else (stats.mser_truncation(walls) if len(walls) > 1 else 0)
    if any((r.get("model") or {}).get("operators") for r in ranks):
        warmup = max(warmup, FIRST_TIMED_ITERATION)  # the counted iteration ran slowed by the count
    if len(walls) - warmup < 1:
        warmup = max(0, len(walls) - 1)
    steady = merged[warmup:]
    summary: dict[str, Any] = {"iteration_ms": asdict(stats.Summary.of([m["wall_ms"] for m in steady]))}
    for c in COMPONENTS:
        summary[c] = asdict(stats.Summary.of([m[c] for m in steady]))
    it_ms = summary["iteration_ms"]["median"]
    summary["throughput_samples_per_s"] = (
        world_size * local_batch_size / (it_ms / 1e3) if (local_batch_size and it_ms > 0) else None
    )
    summary["sync_ms"] = None
    summary["buckets"] = summarise_buckets(ranks, warmup)
    achieved = stats.relative_ci_halfwidth([m["wall_ms"] for m in steady]) if len(steady) >= 3 else None
    return summary, warmup, achieved


def environment_info(torch_version: str | None = None, nccl: str | None = None) -> dict[str, Any]:
    import platform

    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "srifty": __version__,
        "platform": platform.platform(),
        "nccl": nccl,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


PARTIAL_SUFFIX = ".partial.json"


def save_partial(doc: dict[str, Any], out: str | os.PathLike[str]) -> str:
    """Write a partial profile (a run that did not finish) where it loses nothing: at ``out``,
    unless ``out`` already holds a complete profile, which stays, and the partial one goes beside
    it as ``<name>.partial.json`` (left out when the directory is read as a corpus). Returns the
    path written."""
    target = Path(out)
    try:
        keep = target.exists() and json.loads(target.read_text()).get("status") == "complete"
    except (OSError, ValueError, AttributeError):
        keep = False
    if keep:
        target = target.with_name(target.name.removesuffix(".json") + PARTIAL_SUFFIX)
    save(doc, target)
    return str(target)
