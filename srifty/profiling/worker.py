"""Entry point of each profiled worker: ``python -m srifty.profiling.worker SCRIPT ARGS`` (or
``-m MODULE ARGS``).

torchrun starts this module in every rank. It installs the recorder, runs the user's
script unchanged as ``__main__``, and leaves with exit status 0 when srifty has measured
enough (the script is stopped at the same iteration on every rank). Whatever happens,
the rank's records are flushed to ``$SRIFTY_PROFILE_DIR/rank<R>.json``.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from typing import Any

from srifty.profiling import instrument, parentwatch, stacks
from srifty.profiling.request import BATCH_ARG_ENV


def _on_sigterm(signum: int, frame: object) -> None:
    recorder = instrument.active_recorder()
    if recorder is not None:
        recorder.stop_reason = recorder.stop_reason or "terminated"
        try:
            recorder.flush()
        except OSError:
            pass
    os._exit(128 + signum)


class StderrTail:
    """``sys.stderr`` as the script sees it: written through, its last characters kept, for the
    error of a script that exits with a failing status and says why only in what it printed."""

    def __init__(self, stream: Any, keep: int = 2000) -> None:
        self._stream, self._keep, self.tail = stream, keep, ""

    def write(self, text: str) -> int:
        self.tail = (self.tail + text)[-self._keep:]
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m srifty.profiling.worker SCRIPT|-m MODULE [ARGS...]", file=sys.stderr)
        return 2
    # SCRIPT ARGS, or -m MODULE ARGS (run as `python -m MODULE` runs it, from the current directory)
    module = argv[1] if argv[0] == "-m" and len(argv) > 1 else None
    script, script_args = (module, argv[2:]) if module else (argv[0], argv[1:])
    settings = instrument.WorkerSettings.from_env()
    # the script's option for its batch, with this host's batch (a mix of types gets one per type)
    if (batch_arg := os.environ.get(BATCH_ARG_ENV)) and settings.requested_batch_size:
        script_args = [*script_args, batch_arg, str(settings.requested_batch_size)]
    recorder = instrument.install(settings)
    stacks.arm(settings.out_dir, settings.rank)  # where it waits, should the run hang
    signal.signal(signal.SIGTERM, _on_sigterm)
    # torchrun starts each rank in a session of its own: should torchrun be killed outright, the
    # rank gets SIGTERM (flush, exit) rather than training on, orphaned
    if not parentwatch.die_with_parent(signal.SIGTERM):
        _on_sigterm(signal.SIGTERM, None)
    sys.argv = [script, *script_args]  # run_module sets the module's file in sys.argv[0]
    printed = StderrTail(sys.stderr)
    sys.stderr = printed
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(script)))
    status = 0
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
        recorder.stop_reason = recorder.stop_reason or "script_finished"
    except instrument.ProfilingComplete as done:
        recorder.stop_reason = done.reason
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        recorder.stop_reason = recorder.stop_reason or "script_finished"
        if code != 0:
            recorder.record_error(exc, printed.tail)
        status = code
    except BaseException as exc:  # the user's script failed: keep what was measured
        recorder.record_error(exc)
        recorder.stop_reason = recorder.stop_reason or "worker_failed"
        status = 1
    finally:
        recorder.stop_flusher()
        recorder.flush()
    if status == 0:
        _leave_process_group()
    else:
        err = recorder.error or {}
        print(f"srifty worker rank {settings.rank}: {err.get('traceback') or err.get('message')}", file=sys.stderr)
    return status


def _leave_process_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: do not wait on threads the user's script left behind (data loaders, etc.)
    os._exit(code)
