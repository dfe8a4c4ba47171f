"""The solver's view of srifty's one prediction path, and the inputs it needs.

:class:`ModelOracle` turns :func:`srifty.model.predict_table` into the table of homogeneous rows
the solver composes from; :class:`CachedOracle` keeps its figures on disk per (model file,
profiles, catalog, code); :func:`load_inputs` reads a job's profiles with a catalog that also
knows the hosts they were recorded on; :func:`load_predictor` finds the latency model
``recommend`` and ``predict`` use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from srifty.catalog import Catalog
from srifty.configspec import ClusterConfig, NodeGroup
from srifty.errors import SriftyError
from srifty.features import (GRADIENT_UNKNOWN_NOTE, LOOSE_PROFILE_CI, default_batch, gradient_estimated_note,
                             left_out_notes, loose_profile_note, several_models_note)
from srifty.model import MODEL_CODE, PART_SOURCES, UNCALIBRATED_NOTE, LatencyModel, catalog_for_jobs, predict_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from srifty.features import JobProfile
    from srifty.model import Predictor

# --------------------------------------------------------------------------- the oracle


class ThroughputOracle(Protocol):
    """Predicts homogeneous rows. ``rows`` has instance_type, workers_per_node, nodes,
    local_batch_size; the result adds iteration_ms, interval_low_ms, interval_high_ms,
    compute_ms (per-worker compute at that batch) and source (measured|predicted|transferred),
    and may add profiled_batch_low/high (the batches the type's compute was measured at: a mix
    whose split leaves them gets their bounds in its interval; without them, none) and the
    sources of its parts (srifty.model.PART_SOURCES, and compute_transfer: how a transferred
    row's compute was carried, comma-separated; a recommendation's ``parts`` then say where its
    compute and communication came from; without them, its parts give the figures alone). An
    oracle may also have ``predict_mixes`` (ModelOracle.predict_mixes): the solver then predicts
    the mixes it would show as they are; without it, their figures are composed. And it may have
    ``unpredictable`` (ModelOracle.unpredictable): the solver then leaves those types out before it
    asks for the grid; without it, it finds them when the grid fails."""

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame": ...

    def default_local_batch(self) -> int: ...


class ModelOracle:
    """The solver's view of the one prediction path (:func:`srifty.model.predict_table`):
    homogeneous rows in a DataFrame, the figures every command gives. ``predictor=None`` uses the
    analytical simulator alone (source still says predicted/transferred; the interval is then
    the point)."""

    def __init__(self, job: "JobProfile", catalog: Any, predictor: "Predictor | None" = None) -> None:
        self.job = job
        self.catalog = catalog
        self.predictor = predictor
        if predictor is not None:
            self.builder = predictor.builder(job, catalog)
        else:
            from srifty.features import FeatureBuilder, with_estimated_gradient_size

            self.builder = FeatureBuilder(with_estimated_gradient_size(job, catalog, None), catalog)
        self.notes: list[str] = []

    def default_local_batch(self) -> int:
        return int(default_batch(r.local_batch_size for r in self.job.runs) or 0)

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        """The figures of :func:`srifty.model.predict_table` for homogeneous rows, plus what the
        solver composes mixes from (compute_ms, the profiled batch range) and the notes to show."""
        import numpy as np

        configs = [(ClusterConfig((NodeGroup(int(n), str(t), int(w)),)), float(b))
                   for t, w, n, b in zip(rows["instance_type"], rows["workers_per_node"], rows["nodes"],
                                         rows["local_batch_size"])]
        table = predict_table(self.predictor, self.builder, configs)
        X = table.features
        types = rows["instance_type"].to_numpy()
        for t in sorted(set(rows["instance_type"])):
            for note in self.builder.hardware(str(t)).notes:
                if note not in self.notes:
                    self.notes.append(note)
            ci = self.job.compute_rel_ci(str(t))
            if ci is not None and ci > LOOSE_PROFILE_CI:  # widened in predict_table; said here
                note = loose_profile_note(self.job.model, str(t), ci)
                if note not in self.notes:
                    self.notes.append(note)
        batches = rows["local_batch_size"].to_numpy(dtype=float)
        # rows that are points of a type's compute curve (the solver's ``curve`` rows), no candidate:
        # no note is about them
        curve = rows["curve"].to_numpy(dtype=bool) if "curve" in rows.columns else np.zeros(len(configs), bool)
        # batches outside those measured for the type's compute (FeatureBuilder.batch_bounds says so;
        # not the operator model's, whose interval is its own, nor a network prior's widening)
        extrapolated = {(t, b) for t, b in set(zip(types.tolist(), batches.tolist()))
                        if self.builder.batch_bounds(str(t), b)[1] is not None}
        outside = np.array([(t, b) in extrapolated for t, b in zip(types.tolist(), batches.tolist())], dtype=bool)
        outside &= ~curve & (batches >= 1)  # under one sample a worker: ruled out by the solver, no candidate
        by_source: dict[str, list[str]] = {}  # one note per profiled curve the extrapolations come from
        for t in sorted(set(types[outside])):
            by_source.setdefault(self.builder.profiled_batches(str(t)), []).append(str(t))
        for measured, ts in by_source.items():
            b = batches[outside & np.isin(types, ts)]
            note = (f"per-worker batches {b.min():.4g}-{b.max():.4g} (on {len(ts)} instance type"
                    f"{'s' if len(ts) > 1 else ''}) lie outside the {measured}: their compute is extrapolated "
                    "and their intervals widened to what it could be; profile at the batch you will train with")
            if note not in self.notes:
                self.notes.append(note)
        if LatencyModel.communication_unknown(X).any() and GRADIENT_UNKNOWN_NOTE not in self.notes:
            self.notes.append(GRADIENT_UNKNOWN_NOTE)
        if self.predictor is not None and self.predictor.latency.uncalibrated(X).any() \
                and UNCALIBRATED_NOTE not in self.notes:
            self.notes.append(UNCALIBRATED_NOTE)
        several = (X["world_size"].to_numpy(dtype=float) > 1).any()
        if several and self.builder.grad_bytes_estimated and self.builder.grad_bytes:
            note = gradient_estimated_note(self.builder.grad_bytes)
            if note not in self.notes:
                self.notes.append(note)
        if several and self.job.ddp_models > 1:
            note = several_models_note(self.job.model, self.job.ddp_models)
            if note not in self.notes:
                self.notes.append(note)
        out = _with_figures(rows, table)
        ranges = {str(t): self.builder.profiled_range(str(t)) for t in set(types)}
        out["profiled_batch_low"] = [ranges[str(t)][0] for t in types]
        out["profiled_batch_high"] = [ranges[str(t)][1] for t in types]
        # the most per-worker batch one worker of the type can hold in its GPU's memory (inf: unbounded)
        limit = {str(t): self.job.max_fitting_batch(self.builder.hardware(str(t))) for t in set(types)}
        out["max_fitting_batch"] = [limit[str(t)] for t in types]
        # one worker's need as a line in its batch (nan: unknown), for the solver's rows and mixes
        lines = {b: self.job.memory_line(b) or (np.nan, np.nan) for b in set(batches.tolist())}
        out["memory_fixed_gib"] = [lines[b][0] for b in batches.tolist()]
        out["memory_per_sample_gib"] = [lines[b][1] for b in batches.tolist()]
        # per type, the least per-worker batch that does not fit its GPU (left_out_notes: one note per need)
        least: dict[str, Any] = {}
        for i in range(len(configs)):
            for m in ([] if curve[i] else table.memory_short(i)):
                if m.instance_type not in least or m.batch < least[m.instance_type].batch:
                    least[m.instance_type] = m
        for note in left_out_notes(list(least.values())):
            if note not in self.notes:
                self.notes.append(note)
        return out

    def unpredictable(self, types: Sequence[str], batch: float) -> dict[str, str]:
        """The instance types among ``types`` whose compute at ``batch`` cannot be had (none profiled
        it and nothing carries it there: no spec figures), each with the reason and what to do."""
        out = {}
        for t in types:
            try:
                self.builder.compute_ms(str(t), float(batch))
            except SriftyError as exc:
                out[str(t)] = str(exc)
        return out

    def predict_mixes(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        """The one prediction path's figures for mixes of two types, each group at its own per-worker
        batch (columns :data:`MIX_COLUMNS`, as recommend splits a global batch): iteration_ms,
        interval_low_ms, interval_high_ms, compute_ms (the slowest worker's), source and the sources
        of its parts (srifty.model.PART_SOURCES, compute_transfer)."""
        return _with_figures(rows, predict_table(self.predictor, self.builder, _mix_configs(rows)))


def _with_figures(rows: "pd.DataFrame", table: Any) -> "pd.DataFrame":
    """``rows`` with ``table``'s (a PredictionTable of them) figures: FIGURES, the source and the
    sources of its parts (srifty.model.PART_SOURCES, compute_transfer: how, comma-separated)."""
    out = rows.copy()
    out["iteration_ms"] = table.iteration_ms
    out["interval_low_ms"] = table.low_ms
    out["interval_high_ms"] = table.high_ms
    out["compute_ms"] = table.features["compute_ms"].to_numpy(dtype=float)
    out["source"] = table.source
    for part, values in table.sources().items():
        out[part] = values
    out["compute_transfer"] = [",".join(table.compute_transfer(i) or ()) for i in range(len(out))]
    return out


# the figures of a predicted row that every oracle gives (ModelOracle.predict_rows adds more)
FIGURES = ("iteration_ms", "interval_low_ms", "interval_high_ms", "compute_ms")


# a mix of two types, each at its own per-worker batch: the columns that say which (ModelOracle.predict_mixes)
MIX_COLUMNS = ("instance_type", "workers_per_node", "nodes", "local_batch_size",
               "instance_type_b", "workers_per_node_b", "nodes_b", "local_batch_size_b")


def _mix_configs(rows: "pd.DataFrame") -> list[tuple[ClusterConfig, tuple[float, float]]]:
    return [(ClusterConfig((NodeGroup(int(n), str(t), int(w)), NodeGroup(int(nb), str(tb), int(wb)))),
             (float(b), float(bb)))
            for t, w, n, b, tb, wb, nb, bb in zip(*(rows[c] for c in MIX_COLUMNS))]


class CachedOracle:
    """Remembers an oracle's predictions on disk (``.npz``, no pickle), keyed by everything that
    determines them: the model file, the profiles, the catalog file and the rows asked for.

    The wrapped oracle is built only on a miss (loading a trained model costs seconds), so a
    repeated recommendation over the same inputs skips the model entirely.
    """

    COLUMNS = FIGURES + ("profiled_batch_low", "profiled_batch_high", "max_fitting_batch", "memory_fixed_gib",
                         "memory_per_sample_gib")
    TEXT_COLUMNS = ("source",) + PART_SOURCES + ("compute_transfer",)

    def __init__(self, make: Any, identity: dict[str, Any], default_batch: int, directory: Any = None) -> None:
        self.make = make
        self.identity = identity
        self._default_batch = default_batch
        self._inner: Any = None
        self.directory = directory
        self.hit = False
        self.notes: list[str] = []

    def default_local_batch(self) -> int:
        return self._default_batch

    def _path(self, rows: "pd.DataFrame", keys: Sequence[str]) -> Any:
        import hashlib
        import json
        from pathlib import Path

        from srifty.catalog import cache_dir

        h = hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode())
        h.update(rows[list(keys)].to_csv(index=False).encode())
        return Path(self.directory or (cache_dir() / "predictions")) / f"{h.hexdigest()[:32]}.npz"

    def predict_rows(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        out, self.notes = self._cached(rows, MIX_COLUMNS[:4], "predict_rows", self.COLUMNS)
        return out

    def predict_mixes(self, rows: "pd.DataFrame") -> "pd.DataFrame":
        """ModelOracle.predict_mixes, kept on disk as the homogeneous rows are."""
        return self._cached(rows, MIX_COLUMNS, "predict_mixes", FIGURES)[0]

    def unpredictable(self, types: Sequence[str], batch: float) -> dict[str, str]:
        """ModelOracle.unpredictable, kept on disk as the predictions are (a run that finds none
        such loads no model to learn it)."""
        import numpy as np
        import pandas as pd

        asked = pd.DataFrame({"unpredictable_at": float(batch), "instance_type": [str(t) for t in types]})
        path = self._path(asked, list(asked.columns))
        z = _load(path)
        if z is not None and {"types", "reasons"} <= z.keys():
            return dict(zip((str(t) for t in z["types"]), (str(r) for r in z["reasons"])))
        out = self._wrapped().unpredictable(types, batch)
        _save(path, types=np.array(list(out), dtype=str), reasons=np.array(list(out.values()), dtype=str))
        return out

    def _wrapped(self) -> Any:
        """The wrapped oracle, built on the first cache miss."""
        if self._inner is None:
            self._inner = self.make()
        return self._inner

    def _cached(self, rows: "pd.DataFrame", keys: Sequence[str], method: str,
                columns: Sequence[str]) -> tuple["pd.DataFrame", list[str]]:
        """The wrapped oracle's ``method`` on ``rows`` (keyed by their ``keys`` columns): from the
        cache where it holds them, else computed and kept; with the wrapped oracle's notes."""
        import numpy as np

        path = self._path(rows, keys)
        z = _load(path)
        if z is not None and "error" in z:  # these rows could not be predicted: said again, no model loaded
            message, hint, code = (str(x) for x in z["error"])
            failed = SriftyError(message, hint or None)
            failed.exit_code = int(code)
            self.hit = True
            raise failed
        if z is not None and {*columns, *self.TEXT_COLUMNS, "notes"} <= z.keys():
            out = rows.copy()
            for c in columns:
                out[c] = z[c]
            for c in self.TEXT_COLUMNS:
                out[c] = z[c].astype(object)
            self.hit = True
            return out, [str(n) for n in z["notes"]]
        try:
            out = getattr(self._wrapped(), method)(rows)
        except SriftyError as exc:  # as much a function of the key as a prediction: kept too
            _save(path, error=np.array([exc.message, exc.hint or "", str(exc.exit_code)], dtype=str))
            raise
        notes = list(getattr(self._inner, "notes", []))
        _save(path, **{c: out[c].to_numpy(dtype=float) for c in columns},
              **{c: out[c].to_numpy().astype(str) for c in self.TEXT_COLUMNS}, notes=np.array(notes, dtype=str))
        return out, notes


def _load(path: Path) -> "dict[str, Any] | None":
    """The arrays of the cache file ``path`` (None where there is none, or it cannot be read: the
    figures are then computed again)."""
    import numpy as np

    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None


def _save(path: Path, **arrays: Any) -> None:
    """Write ``arrays`` to the cache file ``path`` atomically (a cache that cannot be written is
    only slower)."""
    import numpy as np

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)
    except OSError:
        pass


# The code whose changes change a cached prediction (part of the prediction cache's key).
CACHED_MODEL = "latency-model.npz"  # in the cache directory: the model trained here when the shipped one is stale
PREDICTION_CODE = tuple(str(f) for f in MODEL_CODE) + (str(Path(__file__).resolve()),)


def file_identity(paths: Sequence[Any]) -> list[tuple[str, int, str]]:
    """(path, size, sha256) of files (directories expanded), for cache keys."""
    import hashlib
    from pathlib import Path

    out = []
    for p in paths:
        p = Path(p)
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                out.append((str(f.resolve()), f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest()))
    return out


class ProfiledHostsCatalog:
    """A catalog that also knows the hosts a profile was recorded on (e.g. ``local``), so
    that their compute can be transferred to catalog types by the model's transfer path.

    A profiled host is described by what the profile recorded: its usable CPUs (no GPU)."""

    def __init__(self, catalog: Any, hosts: dict[str, Any]) -> None:
        self.inner = catalog
        self.hosts = hosts

    def get(self, name: str) -> Any:
        if name in self.hosts:
            return self.hosts[name]
        return self.inner.get(name)

    def has(self, name: str) -> bool:
        return name in self.hosts or self.inner.has(name)

    def gpu_spec(self, gpu_name: str) -> Any:
        return self.inner.gpu_spec(gpu_name)

    @property
    def speed_corrections(self) -> list[Any]:
        return self.inner.speed_corrections

    @property
    def warnings(self) -> list[str]:
        return list(getattr(self.inner, "warnings", []))


def profiled_hosts(profiles: Sequence[Any], catalog: Any) -> dict[str, Any]:
    """InstanceType entries for profiled host types the catalog does not know."""
    from srifty.catalog import InstanceType

    out: dict[str, Any] = {}
    for p in profiles:
        cl = (p.doc or {}).get("cluster") or {}
        for h in cl.get("hosts") or []:
            name = h.get("instance_type")
            if not name or name in out:
                continue
            try:
                catalog.get(name)
                continue
            except SriftyError:
                pass
            spec = h.get("spec") or {}
            cpus = spec.get("cpu_quota_cores") or spec.get("usable_cpus") or spec.get("logical_cpus") or 1
            out[name] = InstanceType(name=name, family="profiled-host", arch=str(spec.get("arch") or ""),
                                     gpu_name="", gpu_count=0, gpu_memory_gib=None, accelerator_name="",
                                     accelerator_count=0, vcpus=float(cpus), memory_gib=spec.get("memory_gib"),
                                     network_gbps=None, network_up_to_gbps=None, efa_interfaces=0,
                                     intra_node_link="", intra_node_bandwidth_gbytes_per_s=None)
    return out



# --------------------------------------------------------------------------- loading


def load_inputs(profile_paths: Sequence[str], catalog: "Catalog | None",
                with_emulated: bool = False) -> tuple["JobProfile", Any]:
    """The job of the given profiles and a catalog that also knows their profiled hosts (e.g.
    'local', whose compute is then transferred). ``catalog`` None: the EC2 catalog;
    ``with_emulated``: joined with the emulated one when the profiles ran on emulated hosts (as
    ``predict`` answers; ``recommend`` searches only the catalog it is given)."""
    from srifty import profile as profile_mod
    from srifty.features import job_from_profiles

    profiles = profile_mod.load_many(list(profile_paths))
    job = job_from_profiles(profiles)
    if with_emulated:
        catalog = catalog_for_jobs([job], catalog)
    catalog = catalog or Catalog.default()
    hosts = profiled_hosts(profiles, catalog)
    return job, (ProfiledHostsCatalog(catalog, hosts) if hosts else catalog)


def default_model_path() -> "Any":
    """The latency model ``srifty recommend`` uses: $SRIFTY_MODEL; else the model shipped with
    srifty (trained on the shipped corpus) when it is current; else one trained here once and
    kept in the cache directory."""
    import os
    from pathlib import Path

    from srifty import model as model_mod
    from srifty.catalog import cache_dir

    if os.environ.get("SRIFTY_MODEL"):
        return Path(os.environ["SRIFTY_MODEL"])
    return model_mod.shipped_model() or (cache_dir() / CACHED_MODEL)


def load_predictor(model: str | None, say: Any = None) -> "Predictor | None":
    """``simulator``: none (analytical simulator only); a path, or $SRIFTY_MODEL: that model file,
    loaded as it is (never retrained over); None: the default model (:func:`default_model_path`),
    trained once on the shipped corpus (profiles/pollux, profiles/lambda, profiles/emulated) and
    cached when the shipped one cannot be used."""
    import os
    from pathlib import Path

    from srifty import model as model_mod

    if model == "simulator":
        return None
    model = model or os.environ.get("SRIFTY_MODEL") or None
    if model:
        return model_mod.load(model)
    path = default_model_path()
    shipped_card = model_mod.read_card(model_mod.SHIPPED_MODEL)
    corpus = shipped_card.get("data_sha256") if shipped_card else None
    if Path(path).exists():
        if path == model_mod.SHIPPED_MODEL or model_mod.card_is_current(model_mod.read_card(path), corpus):
            try:
                return model_mod.load(path)
            except SriftyError as exc:  # written by another srifty version, or damaged: it is only a cache
                if say:
                    say(f"The cached latency model {path} cannot be used ({exc.message}); training it again.")
        elif say:
            say(f"The cached latency model {path} was trained on another corpus or by another model revision; "
                "training it again.")
    if path == model_mod.SHIPPED_MODEL:  # never rewrite the installed package: train into the cache
        from srifty.catalog import cache_dir

        path = cache_dir() / CACHED_MODEL
    if say:
        say(f"Training the latency model on the shipped corpus once (under a minute); it is saved to {path}.")
    pred = model_mod.default_predictor(quick=True)
    model_mod.save(pred, path)
    return pred
