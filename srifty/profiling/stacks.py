"""Where the workers of a hung run were waiting.

Each profiled worker arms :data:`STACK_SIGNAL` to write the Python stack of every thread to
``stack<R>.txt`` in its run directory (:func:`arm`, Python's ``faulthandler``). When no iteration
finishes in time, the supervisor, before stopping the run, has :func:`where_waiting` send that
signal to the workers it started on this machine, read what they wrote, and say where each stood
in the script (the innermost frame of the thread running it, and the script's own line that led
there; ranks that wait in the same place together), for the error that says the run hung.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import IO, Any, Iterable

STACK_SIGNAL = signal.SIGUSR1
# the frame through which every worker runs the script: it marks the thread that runs it
WORKER_FRAME = "srifty/profiling/worker.py"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')
_ARMED: list[IO[str]] = []  # the open file a worker's stacks go to, for as long as it lives


def stack_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"stack{rank}.txt"


def arm(run_dir: str, rank: int) -> None:
    """In a worker: write every thread's stack to its ``stack<R>.txt`` on :data:`STACK_SIGNAL`."""
    handle = open(stack_path(run_dir, rank), "w")
    _ARMED.append(handle)
    faulthandler.register(STACK_SIGNAL, file=handle, all_threads=True)


def armed() -> bool:
    """Whether this worker armed :data:`STACK_SIGNAL` and the script has not taken the signal for
    itself since (a handler of its own, which the request would run instead)."""
    return bool(_ARMED) and signal.getsignal(STACK_SIGNAL) in (signal.SIG_DFL, None)


def _shown(file: str) -> str:
    """A frame's file as an error names it: inside an installed package, from the package on."""
    _, sep, inside = file.rpartition("site-packages/")
    return inside if sep else file


def place(frames: list[tuple[str, str, str]], script: str | None) -> str:
    """``FUNCTION (FILE:LINE)`` of the innermost of ``frames`` (file, line, function; innermost
    first), and ``, from line N of SCRIPT`` where a frame of ``script`` led there."""
    own = [f for f in frames if script and Path(f[0]).name == Path(script).name
           and os.path.realpath(f[0]) == os.path.realpath(script)]
    file, line, function = frames[0]
    if own and own[0] == frames[0]:
        return f"{function} ({Path(file).name}:{line})"
    where = f"{function} ({_shown(file)}:{line})"
    return where + (f", from line {own[0][1]} of {Path(script or '').name}" if own else "")


def waiting_at(dump: str, script: str | None) -> str:
    """Where a worker's ``dump`` (faulthandler's, most recent call first) shows the thread running
    ``script`` to be: ``"waiting in FUNCTION (FILE:LINE), from line N of SCRIPT"``; '' where the
    dump holds no such thread."""
    threads = [[m.groups() for m in map(_FRAME.match, block.splitlines()) if m]
               for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)]
    running = next((t for t in threads if any(f[0].endswith(WORKER_FRAME) for f in t)), None)
    return f"waiting in {place(running, script)}" if running else ""


def where_waiting(run_dir: str, records: Iterable[dict[str, Any]], started: set[int], script: str | None,
                  wait_s: float = 1.0) -> str:
    """Have the workers of ``records`` that run on this machine, among the processes the run
    ``started``, that still hold :data:`STACK_SIGNAL` as armed (:func:`armed`) write their stacks,
    and say where they were waiting, the ranks waiting in the fewest places first ('' where none
    could say)."""
    here = socket.gethostname()
    asked = []
    for r in sorted(records, key=lambda r: int(r.get("rank", 0))):
        pid = r.get("pid")
        if isinstance(pid, int) and pid in started and r.get("hostname") == here and r.get("stack_signal"):
            try:
                os.kill(pid, STACK_SIGNAL)
                asked.append(int(r.get("rank", 0)))
            except OSError:
                pass
    if not asked:
        return ""
    time.sleep(wait_s)
    by_place: dict[str, list[int]] = {}
    for rank in asked:
        try:
            where = waiting_at(stack_path(run_dir, rank).read_text(errors="replace"), script)
        except OSError:
            continue
        if where:
            by_place.setdefault(where, []).append(rank)
    # the fewest first: a rank that waits where the others do not is the likelier cause
    groups = sorted(by_place.items(), key=lambda kv: (len(kv[1]), kv[1]))
    said = [f"{_ranks(ranks)} {'was' if len(ranks) == 1 else 'were'} {where}" for where, ranks in groups[:3]]
    return "; ".join(said) + (f"; {len(groups) - 3} more places" if len(groups) > 3 else "")


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks[:8]))}" + \
        (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
