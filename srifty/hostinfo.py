"""What a host is: CPU model and cores, memory, CPU quota. Read from /proc and cgroups."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / (1024 * 1024), 2)
    return None


def cpu_quota_cores() -> float | None:
    """CPU quota of this process's cgroup in cores (None when unlimited)."""
    v2 = _read("/sys/fs/cgroup/cpu.max")
    if v2:
        quota, period = (v2.split() + ["100000"])[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    quota = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    period = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or _read("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
    if quota and period and int(quota) > 0:
        return int(quota) / int(period)
    return None


def host_spec() -> dict[str, Any]:
    """The spec of the machine this runs on, as recorded in profiles."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count() or 1,
        "usable_cpus": usable,
        "cpu_quota_cores": cpu_quota_cores(),
        "memory_gib": memory_gib(),
        "arch": platform.machine(),
    }
