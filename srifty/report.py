"""Turning results into what people read: numbers first (``*_summary``), then formatting."""

from __future__ import annotations

from typing import Any, Sequence

from srifty.nccltests import TRANSPORT_NAMES
from srifty.profile import Profile


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def in_batch_order(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive profiles of one model, instance type(s) and world size in batch order (a model
    directory lists b128.json before b32.json); everything else keeps its order."""
    import itertools

    def same_job(s: dict[str, Any]) -> tuple[Any, ...]:
        return s["kind"], s.get("model"), tuple(s.get("instance_types") or ()), s.get("world_size")

    return [s for _, group in itertools.groupby(summaries, key=same_job)
            for s in sorted(group, key=lambda s: s.get("local_batch_size") or 0)]


def profile_summary(p: Profile) -> dict[str, Any]:
    """The figures a person or a script wants from one profile."""
    doc = p.doc
    base: dict[str, Any] = {
        "path": p.path,
        "kind": p.kind,
        "status": p.status,
        "partial_reason": doc.get("partial_reason"),
        "stop_reason": doc["stop_reason"],
        "instance_types": p.instance_types,
        "config": doc["cluster"].get("config"),
        "world_size": p.world_size,
        "nodes": p.nodes,
        "backend": doc["cluster"]["backend"],
    }
    if p.kind == "collectives":
        base["source"] = doc["cluster"].get("launcher")  # "nccl-tests": a log read by srifty import-nccl
        base["transport"] = (doc["cluster"].get("network") or {}).get("transport")
        base["collectives"] = [
            {k: c.get(k) for k in ("world_size", "nodes", "bytes", "median_ms", "busbw_gbps")}
            for c in doc.get("collectives", [])
        ]
        return base
    job = doc["job"]
    s = doc.get("summary") or {}
    meas = doc["measurement"]

    def med(name: str) -> float | None:
        return (s.get(name) or {}).get("median")

    it = s.get("iteration_ms") or {}
    base.update(
        {
            "model": job["model"],
            "local_batch_size": job.get("local_batch_size"),
            "param_count": job.get("param_count"),
            "grad_bytes": job.get("grad_bytes"),
            "buckets": len(job.get("buckets") or []),
            # one worker's tensor memory at its peak (job.memory)
            "memory_peak_mib": round(mem["peak_bytes"] / 2**20, 1) if (mem := job.get("memory")) else None,
            "iteration_ms": it.get("median"),
            "iteration_ci_ms": [it.get("ci_low"), it.get("ci_high")] if it else None,
            "forward_ms": med("forward_ms"),
            "backward_compute_ms": med("backward_compute_ms"),
            "exposed_comm_ms": med("exposed_comm_ms"),
            "optimizer_ms": med("optimizer_ms"),
            "other_ms": med("other_ms"),
            "throughput_samples_per_s": s.get("throughput_samples_per_s"),
            "iterations_used": meas.get("iterations_used"),
            "warmup_iterations": meas.get("warmup_iterations"),
            "achieved_rel_ci": meas.get("achieved_rel_ci"),
            "target_rel_ci": meas.get("target_rel_ci"),
            "wall_seconds": meas.get("wall_seconds"),
            "warnings": doc.get("warnings", []),
        }
    )
    return base


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render_profiles(summaries: Sequence[dict[str, Any]]) -> Any:
    """A rich renderable: one table of training profiles, one per collectives profile."""
    from rich.console import Group
    from rich.table import Table

    parts: list[Any] = []
    training = [s for s in summaries if s["kind"] == "training"]
    if training:
        t = Table(title="Training profiles (medians, ms)", title_justify="left")
        memory = any(s.get("memory_peak_mib") is not None for s in training)  # profiles that counted it
        for col in ("model", "instance types", "workers", "batch", "iteration", "95% CI", "forward",
                    "backward", "exposed comm", "optimizer", "samples/s") + (("memory",) if memory else ()) + (
                    "stop", "status"):
            left = col in ("model", "instance types", "stop", "status")
            t.add_column(col, justify="left" if left else "right", no_wrap=col in ("model", "95% CI", "workers"))
        for s in training:
            ci = s["iteration_ci_ms"]
            t.add_row(
                s["model"],
                s.get("config") or ",".join(s["instance_types"]),
                f"{s['world_size']} on {s['nodes']}",
                _num(s["local_batch_size"], "{}"),
                _num(s["iteration_ms"]),
                f"{ci[0]:.1f}-{ci[1]:.1f}" if ci and ci[0] is not None else "-",
                _num(s["forward_ms"]),
                _num(s["backward_compute_ms"]),
                _num(s["exposed_comm_ms"]),
                _num(s["optimizer_ms"]),
                _num(s["throughput_samples_per_s"]),
                *([_fmt_bytes(s["memory_peak_mib"] * 2**20 if s.get("memory_peak_mib") is not None else None)]
                  if memory else []),
                s["stop_reason"],
                s["status"],
            )
        parts.append(t)
    for s in summaries:
        if s["kind"] != "collectives":
            continue
        what = "Allreduce, nccl-tests log" if s.get("source") == "nccl-tests" else "Allreduce microbenchmark"
        over = f" over {TRANSPORT_NAMES.get(s['transport'], s['transport'])}" if s.get("transport") else ""
        t = Table(title=f"{what} ({','.join(s['instance_types'])}, {s['backend']}{over})", title_justify="left")
        for col in ("workers", "nodes", "message", "median ms", "bus bw (Gbit/s)"):
            t.add_column(col, justify="right")
        for c in s["collectives"]:
            t.add_row(str(c["world_size"]), str(c["nodes"]), _fmt_bytes(c["bytes"]), _num(c["median_ms"], "{:.3f}"),
                      _num(c["busbw_gbps"], "{:.2f}"))
        parts.append(t)
    return Group(*parts)
