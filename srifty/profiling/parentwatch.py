"""The processes of a profiling run die with srifty, however srifty dies (SIGKILL included).

srifty starts torchrun in a session of its own (so a Ctrl-C reaches srifty alone, which then
stops the run in order and keeps what was measured), and torchrun starts each worker in yet
another session. When srifty is killed outright its clean-up never runs, and without the two
guards below torchrun and its workers would carry on, re-parented to init.

* **Parent-death signal** (Linux ``prctl(PR_SET_PDEATHSIG)``): torchrun is armed, before it
  execs, to get SIGTERM when srifty dies, and tears its workers down; each worker
  (srifty.profiling.worker) is armed to get SIGTERM when torchrun dies, and flushes its records
  and exits. The kernel delivers these, so they fire even when every other srifty process is
  gone. They reach only a direct child, though: not the processes a script forks (data
  loaders), nor the ranks of the collectives microbenchmark.
* **Watchdog** (:class:`Watchdog`): a small process, in a session of its own so that a signal
  sent to srifty's process group spares it, reads a pipe from srifty. Only srifty holds the
  write end, so the read ends when srifty exits or is killed; unless srifty said first that the
  run is over (:meth:`Watchdog.release`), the watchdog stops every process that carries the
  run's tag (``$SRIFTY_RUN_ID``, inherited by every descendant, whatever namespace or cgroup it
  runs in, so the emulated backend's hosts are covered too).

Off Linux there is no parent-death signal: arming is a no-op and the watchdog alone applies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Callable

import psutil

RUN_ID_ENV = "SRIFTY_RUN_ID"
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
RELEASE = b"released\n"  # what srifty writes to the watchdog when the run has ended in order
SWEEPS = 5  # a process forked while the watchdog stops the others is found by the next sweep

Prctl = Callable[[int, int, int, int, int], int]


def kill_run_processes(run_id: str, known: set[int] | None = None, grace_s: float = 3.0) -> int:
    """Terminate every process started for ``run_id`` (known pids + any carrying its env tag):
    SIGTERM first, so that workers flush their records, SIGKILL after ``grace_s``. Returns how
    many were alive."""
    victims: dict[int, psutil.Process] = {}
    for pid in known or set():
        try:
            victims[pid] = psutil.Process(pid)
        except psutil.Error:
            pass
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me or proc.pid in victims:
            continue
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id:
                victims[proc.pid] = proc
        except psutil.Error:
            continue
    alive = [p for p in victims.values() if p.is_running()]
    for p in alive:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=grace_s)
    for p in still:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(still, timeout=grace_s)
    return len(alive)


def _load_prctl() -> Prctl | None:
    """libc's prctl(2), or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def _arm(prctl: Prctl | None, sig: int, parent: int) -> bool:
    """Ask for ``sig`` when the parent dies; False when ``parent`` died already (it may have died
    before the request, and then no signal will come: the caller must leave on its own)."""
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    return os.getppid() == parent


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send this process ``sig`` when its parent dies (no-op off Linux).

    The signal follows the *thread* that started this process: call this only in a process whose
    parent waits for it in the thread that started it (torchrun does). Returns False when the
    parent is already gone."""
    parent = os.getppid()
    return _arm(_load_prctl(), sig, parent)


def child_dies_with_us(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that arms the child to get ``sig`` when
    this process dies (the setting survives exec, of ``ip netns exec`` too); None off Linux.

    Spawn from the thread that waits for the child: the kernel sends the signal when that thread
    ends. Everything the child runs between fork and exec is prepared here, so it loads nothing."""
    prctl = _load_prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        if not _arm(prctl, sig, parent):
            os._exit(128 + sig)

    return arm


class Watchdog:
    """A process that stops the run's processes if srifty dies before :meth:`release`.

    Use as a context manager around starting and stopping the run; see the module docstring."""

    def __init__(self, run_id: str) -> None:
        # No run tag in its environment (the run id goes in argv): kill_run_processes in srifty
        # must not take the watchdog for one of the run's processes.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def release(self) -> None:
        """The run has ended and its processes are stopped: let the watchdog go without acting."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.write(RELEASE)
                stdin.close()
            except OSError:  # the watchdog is gone already
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits as soon as it reads
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> "Watchdog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def main(argv: list[str] | None = None) -> int:
    """The watchdog: ``python -m srifty.profiling.parentwatch RUN_ID``, stdin a pipe from srifty."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m srifty.profiling.parentwatch RUN_ID  (stdin: a pipe from srifty)", file=sys.stderr)
        return 2
    if sys.stdin.buffer.read() == RELEASE:  # returns when srifty closes the pipe, or dies
        return 0
    for _ in range(SWEEPS):
        if kill_run_processes(args[0]) == 0:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
