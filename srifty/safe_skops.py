"""Reading and writing skops files without trusting what they say they hold.

A skops file is a zip whose ``schema.json`` names, for every object, the Python type to
build and the loader ("node") that builds it. Some loaders call the named type with
arguments from the file (``ConstructorFromReduceNode``: ``builtins.exec("...")``) or
look up any function by name (``FunctionNode``), so trusting a type by its module's prefix
(``builtins.``) lets a crafted file run code. Here nothing is trusted by prefix: every
(loader, type) pair the file declares must be in an exact allow-list given by the caller,
checked by walking ``schema.json`` *before* skops builds anything, and again against skops'
own list of the types it would not trust by default.

This module sits at the bottom of srifty: it imports only the standard library and skops.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterable

from srifty.errors import SriftyError

# (loader, "module.Type") pairs; the loader names are skops' node classes.
AllowList = frozenset[tuple[str, str]]


class UntrustedModelFile(SriftyError):
    """A model file that declares types outside the allow-list, or is no skops file at all."""


def skops_io() -> Any:
    """``skops.io``, imported without scikit-learn's estimator walk.

    On import skops builds its default trusted-type list from ``sklearn.utils.all_estimators()``,
    whose ``pkgutil.walk_packages`` imports every scikit-learn package (about 0.6 s here, and
    ``sklearn.externals.array_api_compat.torch`` drags torch in, 5-10 s more). srifty never
    relies on that list: :func:`load` trusts exactly its caller's allow-list and passes it to
    skops explicitly. So while skops is first imported the walk returns nothing; it is restored
    straight after, for anyone else who calls it.
    """
    if "skops.io" not in sys.modules:
        import sklearn.utils

        walk = sklearn.utils.all_estimators
        sklearn.utils.all_estimators = lambda *args, **kwargs: []
        try:
            import skops.io  # noqa: F401 - imported for its side effect on sys.modules
        finally:
            sklearn.utils.all_estimators = walk
    return sys.modules["skops.io"]


def declared_types(path: str | Path) -> set[tuple[str, str]]:
    """Every (loader, "module.Type") pair that the skops file at ``path`` declares, read from its
    ``schema.json`` without building anything."""
    try:
        with zipfile.ZipFile(path) as archive:
            schema = json.loads(archive.read("schema.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise UntrustedModelFile(f"{path} is not a skops model file ({type(exc).__name__}: {exc}).",
                                 "Write one with `srifty fit --out MODEL`.") from None
    found: set[tuple[str, str]] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "__loader__" in node:
                found.add((str(node["__loader__"]), f"{node.get('__module__')}.{node.get('__class__')}"))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def load(path: str | Path, allowed: AllowList) -> Any:
    """Load a skops file whose every declared (loader, type) pair is in ``allowed``; refuse it,
    building nothing, otherwise."""
    p = Path(path)
    if not p.is_file():
        raise UntrustedModelFile(f"{p}: no such model file.", "Write one with `srifty fit --out MODEL`.")
    outside = sorted(f"{t} ({loader})" for loader, t in declared_types(p) - allowed)
    if outside:
        raise UntrustedModelFile(
            f"{p} declares types srifty does not trust: {', '.join(outside)}. It was not loaded.",
            "Only load model files written by `srifty fit`; refit the model if it came from elsewhere.")
    sio = skops_io()
    try:
        untrusted = sio.get_untrusted_types(file=str(p))
    except Exception as exc:  # noqa: BLE001 - skops raises several kinds for a bad file
        raise UntrustedModelFile(f"{p} is not a skops model file ({type(exc).__name__}: {exc}).",
                                 "Write one with `srifty fit --out MODEL`.") from None
    names = {t for _, t in allowed}
    beyond = sorted(t for t in untrusted if t not in names)
    if beyond:  # skops saw a type the schema walk did not: refuse rather than guess
        raise UntrustedModelFile(f"{p} holds types srifty does not trust: {', '.join(beyond)}. It was not loaded.",
                                 "Only load model files written by `srifty fit`.")
    try:
        return sio.load(str(p), trusted=list(untrusted))
    except Exception as exc:  # noqa: BLE001 - a damaged file: numpy, zip and skops errors alike
        raise UntrustedModelFile(f"{p} could not be read ({type(exc).__name__}: {exc}).",
                                 "Write it again with `srifty fit --out MODEL`.") from None


def dump(obj: Any, path: str | Path, allowed: AllowList) -> None:
    """Write ``obj`` with skops, refusing (before anything is left at ``path``) an object that
    the matching :func:`load` would refuse."""
    sio = skops_io()
    sio.dump(obj, str(path))
    outside = sorted(f"{t} ({loader})" for loader, t in declared_types(path) - allowed)
    if outside:
        Path(path).unlink()
        raise UntrustedModelFile(f"the model holds types outside srifty's allow-list: {', '.join(outside)}.",
                                 "Add them to the allow-list in srifty.model if they are safe to build.")


def pairs(loader: str, types: Iterable[str]) -> set[tuple[str, str]]:
    """(loader, type) pairs for several types built by one loader."""
    return {(loader, t) for t in types}
