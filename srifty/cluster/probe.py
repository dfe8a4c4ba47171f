"""Measure what the emulated network really delivers: a bounded TCP transfer between two hosts.

Traffic goes only between the two hosts' own addresses on the emulated subnet.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from srifty.cluster import core
from srifty.cluster.core import ClusterState
from srifty.errors import SriftyError

# Receiver: listen on the host's own address, print "ready PORT", read one connection to EOF,
# print bytes and seconds from the first byte to EOF. Gives up after TIMEOUT seconds.
RECEIVER = r"""
import socket, sys, time
addr, timeout = sys.argv[1], float(sys.argv[2])
srv = socket.socket(); srv.bind((addr, 0)); srv.listen(1); srv.settimeout(timeout)
print("ready", srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); conn.settimeout(timeout)
n = 0; first = None
while True:
    b = conn.recv(1 << 20)
    if not b:
        break
    if first is None:
        first = time.perf_counter()
    n += len(b)
print(n, time.perf_counter() - (first or time.perf_counter()), flush=True)
"""

# Sender: connect to the receiver and send exactly NBYTES, then close.
SENDER = r"""
import socket, sys
addr, port, nbytes, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((addr, port), timeout=timeout)
chunk = b"\0" * (1 << 20); left = nbytes
while left > 0:
    left -= s.send(chunk[: min(left, len(chunk))])
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
"""


@dataclass(frozen=True)
class Transfer:
    src: str
    dst: str
    nbytes: int
    seconds: float
    configured_mbit: float  # the slower of the two links

    @property
    def goodput_mbit(self) -> float:
        """Application bytes per second, in Mbit/s (TCP/IP/Ethernet headers not counted)."""
        return self.nbytes * 8 / self.seconds / 1e6

    @property
    def ratio(self) -> float:
        return self.goodput_mbit / self.configured_mbit


def transfer(state: ClusterState, src: str, dst: str, nbytes: int = 25_000_000, timeout: float = 30.0) -> Transfer:
    """Send ``nbytes`` over TCP from host ``src`` to host ``dst``; measured on the receiver."""
    if src == dst:
        raise SriftyError("transfer: pick two different hosts.")
    s, d = state.host(src), state.host(dst)
    recv = subprocess.Popen(core.host_command(state, dst, [sys.executable, "-c", RECEIVER, d.address, str(timeout)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    send = None
    try:
        assert recv.stdout is not None
        line = recv.stdout.readline().split()
        if len(line) != 2 or line[0] != "ready":
            raise SriftyError(f"transfer: the receiver on {dst} did not start: {recv.stderr.read() if recv.stderr else ''}")
        send = subprocess.run(
            core.host_command(state, src, [sys.executable, "-c", SENDER, d.address, line[1], str(nbytes), str(timeout)]),
            capture_output=True, text=True, timeout=timeout + 5)
        if send.returncode != 0:
            raise SriftyError(f"transfer: the sender on {src} failed: {send.stderr.strip()}")
        out, err = recv.communicate(timeout=timeout + 5)
        if recv.returncode != 0:
            raise SriftyError(f"transfer: the receiver on {dst} failed: {err.strip()}")
        got, secs = out.split()
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    if int(got) != nbytes:
        raise SriftyError(f"transfer: {dst} received {got} of {nbytes} bytes.")
    return Transfer(src=src, dst=dst, nbytes=nbytes, seconds=float(secs),
                    configured_mbit=min(s.bandwidth_mbit, d.bandwidth_mbit))
