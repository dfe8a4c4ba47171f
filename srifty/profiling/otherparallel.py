"""Training that is not DDP, noted where the script or its trainer sets it up.

srifty profiles and predicts DDP. A script that shards its model instead (FSDP, FSDP2's
``fully_shard``, DeepSpeed) or runs ``nn.DataParallel`` runs no DDP forward, and the error should
say what it does run. Its source does not always name it: a trainer (HuggingFace's ``--fsdp``,
a Lightning strategy built from a config file) or a helper module of its own sets it up. So each
worker notes the first of them that is built, in ``recorder.model["other_parallelism"]``
(:data:`KINDS` names each), however the script reached it.

``torch.distributed.fsdp`` and ``deepspeed`` are patched only once something imports them (an
import hook): importing the FSDP package costs each worker about 0.6 s, which a DDP script never
pays.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from typing import Any, Callable

# what a worker notes, and its name in an error (srifty.profiling.diagnosis)
KINDS = {
    "fsdp": "FSDP (FullyShardedDataParallel)",
    "fully_shard": "FSDP2 (fully_shard)",
    "deepspeed": "DeepSpeed",
    "data_parallel": "torch.nn.DataParallel (one process, several GPUs)",
}
KEY = "other_parallelism"
FSDP_PACKAGE = "torch.distributed.fsdp"


def _noting(model: dict[str, Any], kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)  # keeps fully_shard's ``state`` attribute
    def noted(*args: Any, **kwargs: Any) -> Any:
        model.setdefault(KEY, kind)
        return original(*args, **kwargs)

    return noted


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` once the module ``name`` has been imported, by whomever, and leaves."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            self.then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _when_imported(name: str, then: Callable[[], None]) -> None:
    if name in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _OnImport(name, then))


def _patch_fsdp(model: dict[str, Any]) -> None:
    fsdp = sys.modules[FSDP_PACKAGE]
    cls = fsdp.FullyShardedDataParallel
    cls.__init__ = _noting(model, "fsdp", cls.__init__)  # type: ignore[method-assign]
    original = getattr(fsdp, "fully_shard", None)
    if original is None:
        return
    noted = _noting(model, "fully_shard", original)
    for name, module in list(sys.modules.items()):  # every path it is imported by
        if name.startswith("torch.distributed") and getattr(module, "fully_shard", None) is original:
            module.fully_shard = noted


def _patch_deepspeed(model: dict[str, Any]) -> None:
    deepspeed = sys.modules["deepspeed"]
    if hasattr(deepspeed, "initialize"):
        deepspeed.initialize = _noting(model, "deepspeed", deepspeed.initialize)


def watch(model: dict[str, Any]) -> None:
    """Note in ``model`` the first training that is not DDP the worker builds."""
    from torch import nn  # here, in the worker: the CLI reads KINDS and must not pay torch's import

    nn.DataParallel.__init__ = _noting(model, "data_parallel", nn.DataParallel.__init__)  # type: ignore[method-assign]
    _when_imported(FSDP_PACKAGE, lambda: _patch_fsdp(model))
    _when_imported("deepspeed", lambda: _patch_deepspeed(model))
