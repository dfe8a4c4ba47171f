"""Thin, checked wrappers over the real system parts: ``ip``, ``tc``, the cgroup file system, /proc.

Every call that changes the system goes through :func:`sh`, which raises a
:class:`~srifty.errors.SriftyError` naming the command and its stderr.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from srifty.errors import SriftyError

NETNS_DIR = Path("/run/netns")
CGROUP_ROOT = Path(os.environ.get("SRIFTY_CGROUP_ROOT", "/sys/fs/cgroup"))

_NEEDS_ROOT = (
    "The emulated cluster creates network namespaces, veth links, tc qdiscs and cgroups, which "
    "needs root and the iproute2 tools (`ip`, `tc`)."
)


def sh(argv: list[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run a system tool; on failure raise an error that names the command and its output."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SriftyError(f"{argv[0]!r} is not installed.", _NEEDS_ROOT + " Install iproute2.") from None
    if check and proc.returncode != 0:
        raise SriftyError(
            f"`{' '.join(argv)}` failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
        )
    return proc


def check_environment() -> "CgroupDriver":
    """Refuse clearly unless we are root with ip, tc and a cgroup cpu controller; return the driver."""
    if os.geteuid() != 0:
        raise SriftyError(
            "The emulated cluster needs root.",
            _NEEDS_ROOT + " Run srifty as root (e.g. `sudo .venv/bin/srifty cluster up ...`), or use "
            "`srifty profile --backend local` which needs no privileges.",
        )
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        raise SriftyError(
            f"Missing tool(s): {', '.join(missing)}.",
            _NEEDS_ROOT + " Install them (Debian/Ubuntu: `apt-get install iproute2`) and retry.",
        )
    return CgroupDriver.detect()


@dataclass(frozen=True)
class CgroupDriver:
    """CPU quota through cgroup v1 (``cpu.cfs_quota_us``) or v2 (``cpu.max``), whichever exists."""

    version: int
    base: Path  # directory under which srifty's cgroups are created

    @classmethod
    def detect(cls) -> "CgroupDriver":
        v1 = CGROUP_ROOT / "cpu"
        if (v1 / "cpu.cfs_quota_us").exists():
            return cls(1, v1)
        controllers = CGROUP_ROOT / "cgroup.controllers"
        if controllers.exists() and "cpu" in controllers.read_text().split():
            return cls(2, CGROUP_ROOT)
        raise SriftyError(
            f"No cgroup CPU controller found under {CGROUP_ROOT} (looked for cpu/cpu.cfs_quota_us "
            "for cgroup v1 and a 'cpu' entry in cgroup.controllers for v2).",
            "Mount the cpu controller (v1) or enable it in the root cgroup.subtree_control (v2).",
        )

    def path(self, name: str) -> Path:
        return self.base / name

    def create(self, name: str, cpu_share: float, period_us: int, limit: bool = True) -> Path:
        """A cgroup weighted for ``cpu_share`` cores, capped at it unless ``limit`` is false."""
        p = self.path(name)
        if self.version == 2:
            ctl = self.base / "cgroup.subtree_control"
            if "cpu" not in ctl.read_text().split():
                ctl.write_text("+cpu")
        p.mkdir(exist_ok=True)
        quota = max(1000, int(round(cpu_share * period_us)))
        # The quota caps a host; a high weight makes it also *get* its share when other work
        # on the machine competes (each ordinary task weighs 1024 in v1, 100 in v2), as a
        # VM's dedicated vCPUs would. Weights stay proportional to the shares among hosts.
        if self.version == 1:
            (p / "cpu.shares").write_text(str(max(2, int(cpu_share * 8192))))
        else:
            (p / "cpu.weight").write_text(str(min(10000, max(1, int(cpu_share * 800)))))
        if self.version == 1:
            # The period must be set before a quota that only fits the new period.
            (p / "cpu.cfs_quota_us").write_text("-1")
            (p / "cpu.cfs_period_us").write_text(str(period_us))
            (p / "cpu.cfs_quota_us").write_text(str(quota) if limit else "-1")
        else:
            (p / "cpu.max").write_text(f"{quota if limit else 'max'} {period_us}")
        return p

    def quota(self, name: str) -> tuple[int, int] | None:
        """(quota_us, period_us) as the kernel reports it; None if the cgroup is gone; quota -1: none."""
        p = self.path(name)
        try:
            if self.version == 1:
                return int((p / "cpu.cfs_quota_us").read_text()), int((p / "cpu.cfs_period_us").read_text())
            q, per = (p / "cpu.max").read_text().split()
            return (-1 if q == "max" else int(q)), int(per)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stat(self, name: str) -> dict[str, int]:
        try:
            lines = (self.path(name) / "cpu.stat").read_text().splitlines()
        except FileNotFoundError:
            return {}
        return {k: int(v) for k, v in (ln.split() for ln in lines if len(ln.split()) == 2)}

    def pids(self, name: str) -> list[int]:
        try:
            return [int(x) for x in (self.path(name) / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def list(self, prefix: str) -> list[str]:
        try:
            return sorted(d.name for d in self.base.iterdir() if d.is_dir() and d.name.startswith(prefix))
        except FileNotFoundError:
            return []

    def remove(self, name: str, timeout: float = 5.0) -> None:
        p = self.path(name)
        deadline = time.monotonic() + timeout
        while True:
            try:
                p.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise SriftyError(f"Could not remove cgroup {p}: {exc}; processes still in it: "
                                      f"{self.pids(name)}.") from None
                kill_pids(self.pids(name), grace=0.0)
                time.sleep(0.05)


# ---- network namespaces ------------------------------------------------------------------------

def netns_list(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def netns_pids(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` (like ``ip netns pids``, without forking)."""
    try:
        st = os.stat(NETNS_DIR / name)
    except FileNotFoundError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            s = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if s.st_ino == st.st_ino and s.st_dev == st.st_dev:
            out.append(int(entry))
    return out


def root_links(prefix: str) -> list[str]:
    """Links in the root namespace whose name starts with ``prefix`` (srifty creates none; swept anyway)."""
    try:
        return sorted(n for n in os.listdir("/sys/class/net") if n.startswith(prefix))
    except FileNotFoundError:
        return []


# ---- processes ---------------------------------------------------------------------------------

def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_pids(pids: list[int], grace: float = 1.5) -> list[int]:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL what is left. Returns the pids signalled."""
    me = os.getpid()
    pids = sorted({p for p in pids if p != me and p > 1})
    if not pids:
        return []
    sig_first = signal.SIGTERM if grace > 0 else signal.SIGKILL
    for p in pids:
        try:
            os.kill(p, sig_first)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while grace > 0 and time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for p in pids:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.02)
    return pids


def machine_cores() -> float:
    """CPU cores available to this process (affinity), the ceiling for the hosts' total share."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return float(os.cpu_count() or 1)
