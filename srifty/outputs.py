"""Where a command may write: never over one of its own inputs.

Every command that writes a file checks its outputs against what it reads before it does any
work: the same file (a training script replaced by a profile), or a file inside an input
directory (a model or report written into the corpus it was fitted on, which the next
``fit`` or ``show`` of that corpus then trips over). Writes themselves go through
:func:`srifty.profile.atomic_write_text` (never half a file).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from srifty.errors import SriftyError


@dataclass(frozen=True)
class Input:
    """Something a command reads: a file or a directory, and how the user named it."""

    path: str | os.PathLike[str]
    label: str


@dataclass(frozen=True)
class Output:
    """Something a command writes, and how the user named it (``--out``, ``--plot``)."""

    path: str | os.PathLike[str]
    label: str


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(path).expanduser().resolve()


def clobber_reason(out: Output, inp: Input) -> str | None:
    """Why writing ``out`` would damage ``inp``, or None when it would not."""
    target, source = _resolved(out.path), _resolved(inp.path)
    if target == source:
        return f"{out.label} {out.path} is the same file as {inp.label} {inp.path}: writing it would replace that input"
    if source.is_dir() and target.is_relative_to(source):
        return (f"{out.label} {out.path} lies inside {inp.label} {inp.path}: the file would join that input "
                "and break the next command that reads it")
    return None


def refuse_clobbering(outputs: Iterable[Output], inputs: Iterable[Input]) -> None:
    """Raise one clear error, before any work, when an output would overwrite or land inside an
    input, or two outputs are the same file."""
    ins = [i for i in inputs if i.path not in (None, "")]
    outs = [o for o in outputs if o.path not in (None, "")]
    for out in outs:
        for inp in ins:
            reason = clobber_reason(out, inp)
            if reason:
                raise SriftyError(f"{reason}. Nothing was written.",
                                  f"Give {out.label} a path outside the inputs, e.g. in a new directory.")
    seen: dict[Path, Output] = {}
    for out in outs:
        first = seen.setdefault(_resolved(out.path), out)
        if first is not out:
            raise SriftyError(f"{first.label} and {out.label} name the same file ({out.path}).",
                              "Give each output its own path.")


def check_writable(out: Output) -> None:
    """Raise a clear error when ``out`` cannot be written: its parent is a file, or a directory
    srifty may not write into. (A missing parent directory is created when writing.)"""
    target = _resolved(out.path)
    if target.is_dir():
        raise SriftyError(f"{out.label} {out.path} is a directory.", f"Give {out.label} a file name.")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise SriftyError(f"{out.label} {out.path}: {parent} is a file, not a directory.",
                          f"Give {out.label} a path in a directory.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SriftyError(f"{out.label} {out.path}: {parent} is not writable.",
                          f"Give {out.label} a path in a directory you can write to.")


# What matplotlib's Agg back end writes, by file extension.
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "jpg", "jpeg", "webp", "tif", "tiff", "eps", "ps")


def check_plot_format(path: str | os.PathLike[str], label: str = "--plot") -> None:
    """Raise a clear error, before any work, when a plot's file name has no image extension."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        raise SriftyError(f"{label} {path}: the file name says no image format srifty can draw "
                          f"({'.' + ext if ext else 'no extension'}).",
                          f"End it in one of {', '.join('.' + f for f in PLOT_FORMATS)}, e.g. {Path(path).stem}.png.")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        as_created(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created, with its directory, if missing) for
    the ``with`` block: one process at a time across srifty's processes."""
    import fcntl

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def as_created(path: str | os.PathLike[str]) -> None:
    """Give a temporary file (mkstemp makes them 0600) the mode a plain ``open`` would have."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 110) -> None:
    """Write a matplotlib figure through a temporary file and a rename (never half an image),
    creating the directory, in the format its extension names."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=target.suffix, dir=str(target.parent))
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower() or None)
        as_created(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
