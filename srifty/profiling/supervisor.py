"""Running a plan's processes and deciding when to stop them: :class:`Supervisor` starts them
(armed to die with srifty), watches the workers' record files for progress, stops the run at the
hard time limit or when no iteration finishes within the start-up or hang timeout, and on every
exit path terminates everything the run started; :func:`read_record` and
:func:`read_rank_records` read the records the workers flush.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

from srifty.profiling.parentwatch import RUN_ID_ENV, Watchdog, child_dies_with_us, kill_run_processes
from srifty.profiling.request import LaunchPlan, ProgressFn


@dataclass
class RunOutcome:
    """How the supervised processes ended."""

    returncodes: list[int | None]
    reason: str | None  # None: ended by themselves
    wall_seconds: float
    log_tail: str
    signum: int = int(signal.SIGINT)  # reason "interrupted": the signal that did it (SIGTERM/SIGHUP: Terminated)
    hung_at: str = ""  # reason "hung": where the workers were waiting (srifty.profiling.stacks), where known


def read_record(path: Path) -> dict[str, Any] | None:
    """One worker's flushed records, or None while it does not exist (or is being replaced)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def read_rank_records(run_dir: str, prefix: str = "rank") -> list[dict[str, Any]]:
    paths = sorted(Path(run_dir).glob(f"{prefix}[0-9]*.json"), key=lambda q: int(q.stem[len(prefix):]))
    return [r for r in map(read_record, paths) if r is not None]


class Supervisor:
    """Runs a plan's processes and watches them until they end, hang or run out of time."""

    def __init__(self, plan: LaunchPlan, run_id: str, log_path: str) -> None:
        self.plan = plan
        self.run_id = run_id
        self.log_path = log_path
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen_pids: set[int] = set()

    def _spawn(self) -> None:
        """Start the plan's commands, each in a session of its own (a Ctrl-C reaches srifty only,
        which stops them in order), armed to get SIGTERM should srifty die first (torchrun then
        stops its workers; see srifty.profiling.parentwatch)."""
        log = open(self.log_path, "ab")
        arm = child_dies_with_us(signal.SIGTERM)
        try:
            for cmd in self.plan.commands:
                env = dict(os.environ)
                env.update(cmd.env)
                env[RUN_ID_ENV] = self.run_id
                self.procs.append(
                    subprocess.Popen(
                        [*cmd.wrapper, *cmd.argv],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        preexec_fn=arm,
                    )
                )
        finally:
            log.close()

    def _track_children(self) -> None:
        for p in self.procs:
            try:
                parent = psutil.Process(p.pid)
                self.seen_pids.add(p.pid)
                self.seen_pids.update(c.pid for c in parent.children(recursive=True))
            except psutil.Error:
                pass

    def run(
        self,
        poll: Callable[[], dict[str, Any]],
        startup_timeout: float,
        hang_timeout: float,
        hard_limit: float,
        progress: ProgressFn | None = None,
        on_hang: Callable[[set[int]], str] | None = None,
    ) -> RunOutcome:
        """Run until all processes exit. ``poll`` returns {'iterations': n, 'done': bool};
        ``on_hang``, given the processes the run started, says where a hung run's workers wait
        (called before they are stopped).

        Call it in the thread that should own the processes: they are armed to stop when that
        thread ends, and a watchdog stops them if srifty is killed before its clean-up runs."""
        t0 = time.monotonic()
        reason: str | None = None
        signum = int(signal.SIGINT)
        hung_at = ""
        last_count, last_change = -1, t0
        watchdog = Watchdog(self.run_id)
        try:
            self._spawn()
            while True:
                self._track_children()
                codes = [p.poll() for p in self.procs]
                if all(c is not None for c in codes):
                    break
                if any(c not in (None, 0) for c in codes):
                    # one process failed: give the others a moment to notice, then stop them
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                        time.sleep(0.2)
                    break
                state = poll()
                now = time.monotonic()
                count = int(state.get("iterations", 0))
                if count != last_count:
                    last_count, last_change = count, now
                if progress is not None:
                    progress(state)
                if now - t0 > hard_limit:
                    reason = "time_cap"
                    break
                if (now - t0 > startup_timeout) if count <= 0 else (now - last_change > hang_timeout):
                    reason = "hung"
                    if on_hang is not None:
                        self._track_children()
                        hung_at = on_hang(set(self.seen_pids))
                    break
                time.sleep(0.25)
        except KeyboardInterrupt as exc:
            reason, signum = "interrupted", int(getattr(exc, "signum", signal.SIGINT))
        finally:
            self._track_children()
            # ask torchrun to stop its workers first, so they flush their records
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except OSError:
                        pass
            end = time.monotonic() + 8
            while time.monotonic() < end and any(p.poll() is None for p in self.procs):
                time.sleep(0.1)
            kill_run_processes(self.run_id, self.seen_pids)
            for p in self.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - killed above
                    pass
            # not reached if the clean-up is cut short (a second Ctrl-C): srifty then exits
            # unreleased, and the watchdog stops what is left
            watchdog.release()
        tail = ""
        try:
            tail = Path(self.log_path).read_text(errors="replace")[-6000:]
        except OSError:
            pass
        return RunOutcome([p.returncode for p in self.procs], reason, time.monotonic() - t0, tail, signum, hung_at)

