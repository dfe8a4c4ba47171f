"""How far the oracle's own figures moved since an earlier recording of the same space
(:class:`RecordingDrift`, :func:`compare_recordings`), whether an earlier evaluation's JSON is
this very recording regenerated from the cache (:func:`same_recording`), and how the report
names it (:func:`recording_label`). Apart from the run: it only reads JSON and measured figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from srifty.evaluate.results import Evaluation


@dataclass(frozen=True)
class RecordingDrift:
    """How far this recording's measured throughputs lie from an earlier recording of the same
    space (same model, per-worker batch and configurations): the oracle's own repeatability from
    one recording to another, which bounds how closely a prediction can be checked against it."""

    previous: str  # which recording it was compared with
    configurations: int  # configurations measured in both
    single_host_mape: float  # mean |now / before - 1| over the single-host configurations
    multi_host_mape: float  # the same over the multi-host configurations
    # the earlier figure of each multi-host configuration, scaled by how this recording's single
    # hosts changed (geometric mean of its hosts' now/before ratios), taken as a prediction of
    # the figure now: what a predictor that knew the earlier recording exactly would miss by
    replay_mape: float
    replay_worst: float
    replayed: int  # multi-host configurations whose every host type was measured alone in both


def same_recording(previous: dict[str, Any], ev: "Evaluation") -> bool:
    """Whether ``previous`` (an evaluation's JSON) holds the very runs of ``ev`` (regenerated from
    the cache): every configuration carries the same recording time."""
    before = {c["config"]: c.get("measured_at") for c in previous.get("candidates", [])}
    return bool(ev.candidates) and all(c.measured_at and before.get(c.config) == c.measured_at for c in ev.candidates)


def recording_label(previous: dict[str, Any], where: str, fallback_date: str | None = None) -> str:
    """How the report names an earlier recording: the day of its first run (older JSONs do not
    record it: ``fallback_date``, e.g. when the file was committed) and where it was read."""
    days = sorted(c["measured_at"][:10] for c in previous.get("candidates", []) if c.get("measured_at"))
    if days:
        return f"the recording of {days[0]} ({where})"
    return f"the earlier recording in {where}" + (f" (committed {fallback_date})" if fallback_date else "")


def compare_recordings(previous: dict[str, Any], ev: "Evaluation", label: str) -> RecordingDrift | None:
    """``ev``'s measured figures against an earlier evaluation's JSON (see :class:`RecordingDrift`).

    None when the two share no multi-host configuration with both its host types measured alone,
    or when ``previous`` is another model or per-worker batch. When ``previous`` is the same
    recording (regenerated from cached runs), its own comparison is kept."""
    if previous.get("model") != ev.model or previous.get("batch_size") != ev.batch_size:
        return None
    if same_recording(previous, ev):
        kept = previous.get("drift")
        return RecordingDrift(**kept) if kept else None
    before = {c["config"]: c.get("measured_samples_per_s") for c in previous.get("candidates", [])}
    pairs = [(c, before[c.config]) for c in ev.candidates if c.measured_samples_per_s and before.get(c.config)]
    change = {c.config: c.measured_samples_per_s / b - 1 for c, b in pairs}
    host_ratio = {c.hosts[0]: 1 + change[c.config] for c, _ in pairs if len(c.hosts) == 1}
    single = [abs(change[c.config]) for c, _ in pairs if len(c.hosts) == 1]
    multi = [abs(change[c.config]) for c, _ in pairs if len(c.hosts) > 1]
    replay = []
    for c, b in pairs:
        if len(c.hosts) > 1 and all(h in host_ratio for h in c.hosts):
            scale = math.exp(sum(math.log(host_ratio[h]) for h in c.hosts) / len(c.hosts))
            replay.append(abs(b * scale - c.measured_samples_per_s) / c.measured_samples_per_s)
    if not replay:
        return None
    return RecordingDrift(label, len(pairs), sum(single) / len(single), sum(multi) / len(multi),
                          sum(replay) / len(replay), max(replay), len(replay))
