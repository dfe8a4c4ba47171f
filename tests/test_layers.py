"""The layers of docs/ARCHITECTURE.md, checked on the source: every import of a srifty module,
at the top of a file or inside a function, points to the same layer or one below, and no chain
of imports comes back to where it started."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "srifty"
# docs/ARCHITECTURE.md, bottom up; a module's layer is that of its longest matching prefix.
LAYERS: dict[str, int] = {
    "srifty.errors": 0, "srifty.stats": 0, "srifty.trees": 0, "srifty.hostinfo": 0, "srifty.outputs": 0,
    "srifty.simulate": 0,
    "srifty.opmodel": 1, "srifty.capacity": 1,
    "srifty.configspec": 1, "srifty.catalog": 1, "srifty.profile": 1, "srifty.importer": 1,
    "srifty.profiling": 2, "srifty.cluster": 2, "srifty.training": 2,
    "srifty.features": 3, "srifty.gpuspeed": 3, "srifty.nccltests": 3,
    "srifty.model": 4, "srifty.comm": 4,
    "srifty.solver": 5, "srifty.oracle": 5, "srifty.plan": 5,
    "srifty.validate": 6, "srifty.evaluate": 6, "srifty.cpu_to_gpu": 6, "srifty.launch": 6, "srifty.api": 6,
    "srifty.cli": 7, "srifty.commands": 7, "srifty.report": 7, "srifty.__main__": 7,
}
# The package itself is the facade of the API a training script calls (srifty.step,
# srifty.local_batch_size, ...) and holds __version__, which every layer may read: it is not a layer.
FACADE = "srifty"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The srifty modules ``path`` imports anywhere (not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m in modules}


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} has no layer: add it to LAYERS here and to docs/ARCHITECTURE.md"
    return LAYERS[best]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, modules) - {m, FACADE} for m, p in modules.items() if m != FACADE}


def test_every_import_points_down_or_across() -> None:
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, targets in sorted(_graph().items()) for t in sorted(targets) if _layer(t) > _layer(m)]
    assert not upward, upward


def test_no_chain_of_imports_comes_back() -> None:
    graph, state, stack, cycles = _graph(), {}, [], []

    def visit(m: str) -> None:
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, cycles


def test_the_walk_sees_function_local_imports() -> None:
    """The check is only as good as the walk: an import inside a function counts."""
    modules = _modules()
    assert "srifty.profile" in _imports(PACKAGE / "features" / "job.py", modules)  # imported inside load_corpus & co.
    assert "srifty.catalog" not in _imports(PACKAGE / "configspec.py", modules)  # under TYPE_CHECKING only
