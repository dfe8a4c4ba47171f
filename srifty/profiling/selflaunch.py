"""What a script does to launch itself, which torchrun has done already.

srifty runs a script under torchrun, as a recommended plan does across nodes. In a profiled
worker, each of these raises at once (:func:`guard`), and srifty.profiling.diagnosis turns the
exception into the error that says what to change:

- ``torch.multiprocessing.spawn`` or ``start_processes``: the script starts workers of its own
  (PyTorch's DDP tutorial, or Lightning's ``ddp_spawn`` strategy); spawned again, they would set up
  a process group of their own and hang (:class:`ScriptStartsItsOwnWorkers`);
- ``torch.distributed.init_process_group`` after the script set a rendezvous of its own, a
  ``MASTER_PORT`` or a ``tcp://`` init_method at another port than torchrun's: under torchrun the
  workers join torchrun's store there, and would wait for a server nobody runs until the start-up
  timeout (:class:`ScriptSetsItsOwnRendezvous`);
- a process group of another rank or size than torchrun gave the worker (``rank=0,
  world_size=1`` passed explicitly): every worker would train alone, and the profile would time
  allreduces that never left it (:class:`ScriptSetsItsOwnWorld`).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable
from urllib.parse import urlparse

import torch.distributed as dist
import torch.multiprocessing as torch_mp

from srifty.profiling.recorder import WorkerSettings

# torchrun's workers join its own store at MASTER_ADDR:MASTER_PORT where this is set
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"


class ScriptLaunchesItself(RuntimeError):
    """A script launching itself where torchrun has; the subclass's name is what the rank's error
    records (diagnosis.SELF_LAUNCH)."""


class ScriptStartsItsOwnWorkers(ScriptLaunchesItself):
    pass


class LightningStartsItsOwnWorkers(ScriptStartsItsOwnWorkers):
    """PyTorch Lightning's spawning strategies (``ddp_spawn``, ``ddp_fork``, ``ddp_notebook``)."""


class ScriptSetsItsOwnRendezvous(ScriptLaunchesItself):
    pass


class ScriptSetsItsOwnWorld(ScriptLaunchesItself):
    pass


def refuse_own_workers(original: Callable[..., Any]) -> Callable[..., Any]:
    def own_workers(fn: Callable[..., Any], args: Any = (), nprocs: int = 1, *rest: Any, **kwargs: Any) -> Any:
        spawned = f"torch.multiprocessing.{original.__name__}({getattr(fn, '__name__', 'fn')}, nprocs={nprocs})"
        if str(getattr(fn, "__module__", "")).split(".")[0] in ("lightning", "pytorch_lightning"):
            raise LightningStartsItsOwnWorkers(spawned)
        raise ScriptStartsItsOwnWorkers(spawned)

    return own_workers


def own_rendezvous(torchrun_port: str | None, init_method: Any, env: dict[str, str]) -> str | None:
    """What the script set of a rendezvous of its own, where torchrun's workers join its store
    (``env``: the worker's environment at ``init_process_group``); None where it set none."""
    if env.get(AGENT_STORE_ENV) != str(True) or not torchrun_port:
        return None
    if isinstance(init_method, str) and init_method.startswith("tcp://"):
        port = urlparse(init_method).port
        if port is not None and str(port) != torchrun_port:
            return f"init_method={init_method!r}, where torchrun's port is {torchrun_port}"
    if env.get("MASTER_PORT") not in (None, torchrun_port):
        return f"MASTER_PORT={env['MASTER_PORT']}, where torchrun's is {torchrun_port}"
    return None


def guard(settings: WorkerSettings) -> None:
    """Make spawning workers, and a rendezvous or a world of the script's own, raise at once."""
    torch_mp.spawn = refuse_own_workers(torch_mp.spawn)
    torch_mp.start_processes = refuse_own_workers(torch_mp.start_processes)
    torchrun_port = os.environ.get("MASTER_PORT")
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        own = own_rendezvous(torchrun_port, kwargs.get("init_method", args[1] if len(args) > 1 else None),
                             dict(os.environ))
        if own:
            raise ScriptSetsItsOwnRendezvous(own)
        result = original(*args, **kwargs)
        rank, world = dist.get_rank(), dist.get_world_size()
        if (rank, world) != (settings.rank, settings.world_size):
            raise ScriptSetsItsOwnWorld(f"rank {rank} of {world}, where torchrun started this worker as rank "
                                        f"{settings.rank} of {settings.world_size}")
        return result

    dist.init_process_group = init_process_group
