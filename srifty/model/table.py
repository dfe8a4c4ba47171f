"""The training table: feature rows of measured multi-worker runs, with their targets.

:func:`table_for` turns a corpus of jobs into the rows the latency model is fitted and validated
on (srifty.model.latency, srifty.validate): one row per run with two or more workers, the
features of :class:`srifty.features.FeatureBuilder` as the predictor would see them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from srifty.features import FEATURES, FeatureBuilder, JobProfile, LinkScale, Run, run_config

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from srifty.catalog import Catalog


@dataclass
class Table:
    """Feature rows of measured multi-worker runs, with targets and groups for validation."""

    X: "pd.DataFrame"
    y_ms: "np.ndarray"
    model: list[str]
    runs: list[Run]


def table_for(jobs: Sequence[JobProfile], catalog: "Catalog", link_scale: LinkScale | None = None,
              keep: Any = None, min_world: int = 2, views: dict[str, JobProfile] | None = None) -> Table:
    """Rows for every run of ``jobs`` with ``min_world`` or more workers (and ``keep(job, run)``).

    ``views`` maps a model to the (restricted) profile the features may read — in validation,
    what the predictor is allowed to know about a held-out model.
    """
    import numpy as np
    import pandas as pd

    frames, ys, models, runs = [], [], [], []
    for job in jobs:
        chosen = [r for r in job.runs if r.world_size >= min_world and (keep is None or keep(job, r))]
        if not chosen:
            continue
        fb = FeatureBuilder((views or {}).get(job.model, job), catalog, link_scale)
        frames.append(fb.frame([(run_config(r), r.local_batch_size) for r in chosen]))
        ys.extend(r.step_ms for r in chosen)
        models.extend([job.model] * len(chosen))
        runs.extend(chosen)
    if not frames:
        return Table(pd.DataFrame(columns=FEATURES + ["sim_ms", "compute_ms"]), np.array([]), [], [])
    return Table(pd.concat(frames, ignore_index=True), np.array(ys, dtype=float), models, runs)


def unread_overlap_table(jobs: Sequence[JobProfile], catalog: "Catalog", link_scale: LinkScale | None = None
                         ) -> Table | None:
    """The rows of :func:`table_for` as a model whose overlap nobody read would see them: each
    imported trace whose overlap window was read off its sync times (srifty.features.overlap)
    back at the default. The latency model calibrates the interval of such rows on it
    (:meth:`srifty.model.LatencyModel.fit`); None when no job's window was read."""
    if not any(j.overlap_fit is not None for j in jobs):
        return None
    return table_for([replace(j, backward_fraction=None, overlap_fit=None) if j.overlap_fit is not None else j
                      for j in jobs], catalog, link_scale)
