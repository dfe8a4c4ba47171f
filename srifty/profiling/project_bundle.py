"""The project an EC2 run ships with its script: the script's git work tree (or directory), tarred.

A training script seldom stands alone: srifty's examples ``import _common`` from their
directory, and real projects import their own packages and read their own configs. So the
EC2 backend uploads the script's *project* and runs the script inside it on the instance.

* The project root is the root of the git work tree holding the script, else the script's
  directory.
* In a work tree the files are those git counts as part of it: tracked ones plus untracked
  ones that no ignore rule matches (``git ls-files --cached --others --exclude-standard``).
  Elsewhere, every file under the directory.
* Never shipped: ``.git/``, ``__pycache__``, virtual environments (a directory holding
  ``pyvenv.cfg``: the instance builds its own), git submodules and nested repositories,
  and symlinks that lead out of the project or nowhere (a link inside it stays a link,
  so nothing outside the project is ever read).
* Credential files (:data:`CREDENTIAL_DIRS`, :data:`CREDENTIAL_FILES`, ``.env.*``, private
  keys) are left out and named in a note: srifty gives instances their S3 access through an
  instance profile and promises never to put credentials in user data or logs, so the
  bundle must not carry them either. Secrets inside other files are not looked for.
* The script itself, and a requirements file inside the project, are always shipped, even
  when git ignores them.
* The files may total at most ``max_bytes`` (100 MB by default), so that a dataset or a
  checkpoint next to the script is not copied to S3 by accident; the error names the
  biggest files.

The instance unpacks the tarball with :func:`unpack_command` into :data:`INSTANCE_ROOT`
and runs the script from :meth:`ProjectBundle.run_location`; the tests do the same locally.
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from srifty.errors import SriftyError

INSTANCE_ROOT = "/opt/srifty/project"
MB = 1000 * 1000
DEFAULT_MAX_BYTES = 100 * MB
CREDENTIAL_DIRS = frozenset({".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure"})
CREDENTIAL_FILES = frozenset({".env", ".netrc", ".pypirc", ".git-credentials",
                              "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"})
CREDENTIAL_SUFFIXES = (".pem", ".p12", ".pfx")
ENV_TEMPLATES = frozenset({"example", "sample", "template", "dist"})  # .env.example & co. hold no secrets
NEVER_SHIPPED_DIRS = frozenset({".git", "__pycache__"})

SKIP_CREDENTIAL = "credentials"
SKIP_LINK_OUT = "symlink leading out of the project"
SKIP_LINK_BROKEN = "broken symlink"
SKIP_VENV = "virtual environment"
SKIP_NESTED_REPO = "git submodule or nested repository"
SKIP_SPECIAL = "not a regular file"


@dataclass(frozen=True)
class Entry:
    """One path in the bundle, relative to the project root (POSIX separators)."""

    rel: str
    size: int = 0
    link: str | None = None  # a symlink's target, relative to the link's directory


@dataclass(frozen=True)
class Skipped:
    """A path left out that the user may have expected to be shipped, and why (for the notes)."""

    rel: str
    why: str


@dataclass
class ProjectBundle:
    """What is shipped, and where on the instance the script runs from."""

    root: Path
    script: str  # relative to root
    workdir: str  # the directory the script runs in, relative to root ("." for the root)
    git: bool
    entries: list[Entry]
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def contains(self, rel: str) -> bool:
        return any(e.rel == rel for e in self.entries)

    def relative(self, path: str | Path) -> str | None:
        """``path`` relative to the project root, or None when it lies outside."""
        resolved = Path(path).resolve()
        try:
            return resolved.relative_to(self.root).as_posix()
        except ValueError:
            return None

    def run_location(self, unpacked_at: str = INSTANCE_ROOT) -> tuple[str, str]:
        """(directory to run in, script path relative to it) once unpacked at ``unpacked_at``.

        The directory mirrors where ``srifty profile`` was started, when that was inside the
        project (so relative data paths resolve as they did here), else the project root."""
        cwd = posixpath.normpath(posixpath.join(unpacked_at, self.workdir))
        return cwd, posixpath.relpath(posixpath.join(unpacked_at, self.script), cwd)

    def describe(self) -> str:
        kind = "git work tree" if self.git else "directory"
        cwd, script = self.run_location()
        return (f"project {self.root} ({kind}): {len(self.entries)} files, {self.size / MB:.1f} MB; "
                f"the instance runs {script} in {cwd}")

    def notes(self) -> list[str]:
        """One line per kind of path left out that the user may have expected to be shipped."""
        by_reason: dict[str, list[str]] = {}
        for s in self.skipped:
            by_reason.setdefault(s.why, []).append(s.rel)
        lines = []
        for why, paths in by_reason.items():
            shown = ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")
            extra = " (srifty never ships credentials)" if why == SKIP_CREDENTIAL else ""
            lines.append(f"left out of the project ({why}){extra}: {shown}")
        return lines

    def tarball(self) -> bytes:
        """The entries as a gzipped tar. Each file is read whole before it is added, so a file
        edited meanwhile is shipped as one consistent version; one deleted meanwhile is left out."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
            for entry in self.entries:
                path = self.root / entry.rel
                try:
                    info = tar.gettarinfo(str(path), arcname=entry.rel)
                    data = None if entry.link is not None else path.read_bytes()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise SriftyError(f"Cannot read {path} for the project shipped to EC2: {exc}.") from None
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if entry.link is not None:
                    info.type, info.linkname, info.size = tarfile.SYMTYPE, entry.link, 0
                    tar.addfile(info)
                else:
                    info.type, info.size = tarfile.REGTYPE, len(data or b"")
                    tar.addfile(info, io.BytesIO(data or b""))
        return buf.getvalue()


def unpack_command(archive: str, dest: str = INSTANCE_ROOT) -> str:
    """The shell command that unpacks a bundle: the user data runs it on the instance."""
    return f"mkdir -p {shlex.quote(dest)} && tar -xzf {shlex.quote(archive)} -C {shlex.quote(dest)} --no-same-owner"


# --------------------------------------------------------------------------- collecting


def collect(script: str | Path, cwd: str | Path | None = None, always: tuple[str | Path, ...] = (),
            max_bytes: int = DEFAULT_MAX_BYTES, module: bool = False) -> ProjectBundle:
    """The bundle for ``script``: see the module docstring for what goes in.

    ``cwd`` is where srifty was started (default: the current directory); ``always`` are
    further files to ship even when ignored (the requirements file), if inside the project;
    ``module``: the script runs as a module from ``cwd``, whose project (or ``cwd`` itself, outside
    a git work tree) is the one to ship."""
    script_path = Path(script).resolve()
    root, git_error = _project_root(Path(cwd or os.getcwd()).resolve() if module else script_path.parent)
    if not script_path.is_relative_to(root):  # a module installed elsewhere, not the project's
        raise SriftyError(f"The module's file {script_path} lies outside the project {root} that EC2 would run.",
                          "Run srifty from the project the module belongs to, or give the script's path.")
    candidates = _git_files(root) if git_error is None else _walk_files(root)
    forced = [script_path, *(Path(p).resolve() for p in always)]
    candidates += [p.relative_to(root).as_posix() for p in forced if p.is_relative_to(root)]
    entries, skipped = _select(root, candidates)
    workdir = Path(cwd or os.getcwd()).resolve()
    bundle = ProjectBundle(
        root=root,
        script=script_path.relative_to(root).as_posix(),
        workdir=workdir.relative_to(root).as_posix() if workdir.is_relative_to(root) else ".",
        git=git_error is None,
        entries=entries,
        skipped=skipped,
    )
    _check_size(bundle, max_bytes)
    return bundle


def _project_root(script_dir: Path) -> tuple[Path, str | None]:
    """(root, None) for a git work tree; (the script's directory, why not git) otherwise."""
    try:
        res = subprocess.run(["git", "-C", str(script_dir), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return script_dir, f"git unavailable: {exc}"
    if res.returncode != 0 or not res.stdout.strip():
        return script_dir, res.stderr.strip() or "not a git work tree"
    return Path(res.stdout.strip()).resolve(), None


def _git_files(root: Path) -> list[str]:
    res = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=root, capture_output=True, timeout=300)
    if res.returncode != 0:
        raise SriftyError(f"`git ls-files` failed in {root}: {res.stderr.decode(errors='replace').strip()}",
                          "srifty lists the project's files with git to ship them to EC2; fix the repository "
                          "(or run from a copy outside git).")
    # an untracked nested repository is listed as "dir/": a directory, to be noted, not shipped
    return sorted({p.rstrip("/") for p in res.stdout.decode(errors="surrogateescape").split("\0") if p})


def _walk_files(root: Path) -> list[str]:
    """Every file and symlink under ``root``, without descending into symlinked directories,
    ``.git``, ``__pycache__`` or virtual environments (those are listed, to be noted)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            if d in NEVER_SHIPPED_DIRS:
                continue
            if (here / d).is_symlink() or (here / d / "pyvenv.cfg").is_file():
                found.append((here / d).relative_to(root).as_posix())
                continue
            keep.append(d)
        dirnames[:] = keep
        found += [(here / f).relative_to(root).as_posix() for f in filenames]
    return sorted(found)


def _select(root: Path, candidates: list[str]) -> tuple[list[Entry], list[Skipped]]:
    entries: dict[str, Entry] = {}
    skipped: list[Skipped] = []
    venvs = {posixpath.dirname(c) for c in candidates if posixpath.basename(c) == "pyvenv.cfg"} - {""}
    for rel in dict.fromkeys(candidates):
        parts = rel.split("/")
        if NEVER_SHIPPED_DIRS.intersection(parts) or rel.endswith(".pyc"):
            continue
        if _is_credential(parts):
            skipped.append(Skipped(rel, SKIP_CREDENTIAL))
            continue
        venv = next((v for v in venvs if rel == v or rel.startswith(v + "/")), None)
        if venv is not None:
            if rel.endswith("/pyvenv.cfg"):
                skipped.append(Skipped(venv + "/", SKIP_VENV))
            continue
        entry, why = _entry(root, rel)
        if entry is not None:
            entries[rel] = entry
        elif why is not None:
            skipped.append(Skipped(rel + "/" if why in (SKIP_VENV, SKIP_NESTED_REPO) else rel, why))
    return list(entries.values()), skipped


def _is_credential(parts: list[str]) -> bool:
    name = parts[-1]
    if CREDENTIAL_DIRS.intersection(parts[:-1]) or name in CREDENTIAL_FILES or name.endswith(CREDENTIAL_SUFFIXES):
        return True
    return name.startswith(".env.") and name[5:] not in ENV_TEMPLATES


def _entry(root: Path, rel: str) -> tuple[Entry | None, str | None]:
    """The entry for one listed path, or (None, why it is left out); (None, None): gone since listed."""
    path = root / rel
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, None
    if stat.S_ISLNK(st.st_mode):
        return _link_entry(root, rel)
    if stat.S_ISDIR(st.st_mode):
        if (path / "pyvenv.cfg").is_file():
            return None, SKIP_VENV
        return None, SKIP_NESTED_REPO  # git lists a submodule or untracked repository as a directory
    if not stat.S_ISREG(st.st_mode):
        return None, SKIP_SPECIAL
    if not os.access(path, os.R_OK):
        raise SriftyError(f"Cannot read {path}, which belongs to the project shipped to EC2.",
                          "Make it readable, or keep it out of the project (.gitignore).")
    return Entry(rel, st.st_size), None


def _link_entry(root: Path, rel: str) -> tuple[Entry | None, str | None]:
    """A symlink stays a link, re-pointed relative to its own directory, only if it leads to
    something inside the project; the target itself is shipped (or not) on its own account."""
    path = root / rel
    target = Path(os.path.realpath(path))
    if not target.exists():
        return None, SKIP_LINK_BROKEN
    if target != root and not target.is_relative_to(root):
        return None, SKIP_LINK_OUT
    here = Path(os.path.realpath(path.parent))
    return Entry(rel, 0, os.path.relpath(target, here)), None


def _check_size(bundle: ProjectBundle, max_bytes: int) -> None:
    if bundle.size <= max_bytes:
        return
    biggest = sorted(bundle.entries, key=lambda e: e.size, reverse=True)[:5]
    tops: dict[str, int] = {}
    for e in bundle.entries:
        top = e.rel.split("/")[0] + ("/" if "/" in e.rel else "")
        tops[top] = tops.get(top, 0) + e.size
    big_tops = sorted(tops.items(), key=lambda kv: kv[1], reverse=True)[:3]
    where = "add them to .gitignore" if bundle.git else f"move them out of {bundle.root}"
    raise SriftyError(
        f"The project shipped to EC2 with {bundle.script} is {bundle.size / MB:.1f} MB "
        f"({len(bundle.entries)} files under {bundle.root}), above the limit of {max_bytes / MB:.0f} MB. "
        f"Biggest files: {', '.join(f'{e.rel} ({e.size / MB:.1f} MB)' for e in biggest)}; "
        f"biggest top-level entries: {', '.join(f'{k} ({v / MB:.1f} MB)' for k, v in big_tops)}.",
        f"Datasets and checkpoints do not belong in the bundle: {where} and have the script fetch them "
        "(from S3, say), or raise the limit with `ec2: {max_bundle_mb: N}` in srifty's config file "
        "($XDG_CONFIG_HOME/srifty/config.yaml, by default ~/.config/srifty/config.yaml).",
    )
