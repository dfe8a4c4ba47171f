"""Run a command "on" an emulated host: join its CPU cgroup, then enter its network namespace.

Usage (built by :func:`srifty.cluster.host_command`; not meant to be typed)::

    python -m srifty.cluster.enter --cgroup /sys/fs/cgroup/cpu/srifty-main-medium0 \\
        --netns srifty-main-medium0 -- COMMAND [ARGS...]

The pid is written into the cgroup first (children inherit the cgroup), then the process
execs ``ip netns exec NETNS COMMAND...``, so the command keeps this pid. Standard library only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

USAGE = "usage: python -m srifty.cluster.enter --cgroup DIR --netns NAME -- COMMAND [ARGS...]"


def _fail(msg: str) -> int:
    print(f"srifty.cluster.enter: {msg}", file=sys.stderr)
    return 125


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        return _fail(USAGE)
    split = args.index("--")
    opts, command = args[:split], args[split + 1:]
    if len(opts) != 4 or opts[0] != "--cgroup" or opts[2] != "--netns" or not command:
        return _fail(USAGE)
    cgroup, netns = Path(opts[1]), opts[3]
    if not Path("/run/netns", netns).exists():
        return _fail(f"network namespace {netns!r} does not exist; is the emulated cluster up "
                     "(`srifty cluster status`)?")
    try:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        return _fail(f"cannot join cgroup {cgroup} ({exc}); is the emulated cluster up and are you root?")
    try:
        os.execvp("ip", ["ip", "netns", "exec", netns, *command])
    except OSError as exc:
        return _fail(f"cannot run `ip netns exec` ({exc}); install iproute2.")
    return 125  # not reached


if __name__ == "__main__":
    sys.exit(main())
