"""Errors that srifty shows to people: one paragraph that says what happened and what to do."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Callable, Iterator, NoReturn


class SriftyError(Exception):
    """An error with a message written for the user.

    The CLI prints ``message`` (and ``hint`` when given) as one paragraph and exits
    non-zero; the traceback is shown only with ``--debug``.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{sentence(self.message)} {self.hint}"
        return self.message


def sentence(text: str) -> str:
    """``text`` ending as a sentence does, so that what follows it reads as the next one (a
    message that ends with a value it quotes gets its full stop)."""
    return text if text.rstrip().endswith((".", "!", "?")) else text.rstrip() + "."


class ProfileFormatError(SriftyError):
    """A profile file that is not valid JSON, not schema version 1, or breaks the schema."""


class ProfilingFailed(SriftyError):
    """A profiling run that did not complete; a partial profile may have been written."""

    def __init__(self, message: str, hint: str | None = None, partial_path: str | None = None) -> None:
        super().__init__(message, hint)
        self.partial_path = partial_path


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that every ``finally`` runs before srifty exits:
    workers stopped, emulated hosts torn down, partial results written and marked."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP unwind like Ctrl-C (as :class:`Terminated`).

    Only the first signal raises: the clean-up it starts is not cut short by a second one (send
    SIGKILL to stop without cleaning up). Outside the main thread, signals cannot be handled and
    the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_script(main: Callable[[], int]) -> NoReturn:
    """Exit with ``main()``'s status, as the CLI would: SIGTERM/SIGHUP unwind like Ctrl-C (workers
    stopped, emulated hosts torn down), and srifty's own errors print one paragraph, not a traceback
    (the make targets' scripts)."""
    try:
        with terminate_as_interrupt():
            code = main()
    except SriftyError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        exit_interrupted(exc)
    sys.exit(code)


def exit_interrupted(exc: KeyboardInterrupt) -> NoReturn:
    """After Ctrl-C or a :class:`Terminated` signal has unwound (clean-up done): say which, and
    exit 128 + the signal's number, as a shell reports a process killed by it."""
    if threading.current_thread() is threading.main_thread():  # clean-up is done: a late press only exits
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
    terminated = isinstance(exc, Terminated)
    print("Terminated." if terminated else "Interrupted.", file=sys.stderr)
    sys.exit(128 + (exc.signum if terminated else int(signal.SIGINT)))
