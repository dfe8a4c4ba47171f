"""The in-worker recorder: its progress file is written by a flusher thread and by the main
thread (at a stop, on failure, on SIGTERM); the two must never trip over each other."""

from __future__ import annotations

import json
from pathlib import Path

from srifty.profiling.instrument import Recorder, WorkerSettings


def test_final_flush_never_races_the_flusher_thread(tmp_path: Path) -> None:
    rec = Recorder(WorkerSettings(out_dir=str(tmp_path)))
    rec.start_flusher(interval_s=0.0)  # flush as fast as it can, on its own thread
    try:
        for _ in range(500):  # the main thread's flushes (stop rule, errors) at the same time
            rec._dirty = True  # as the training loop does: the flusher always has something to write
            rec.flush()
    finally:
        rec.stop_flusher()
    assert rec._flusher is not None and not rec._flusher.is_alive()  # stop_flusher waits for it
    doc = json.loads((tmp_path / "rank0.json").read_text())
    assert doc["rank"] == 0 and doc["world_size"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.json"]  # no temporary file left behind
