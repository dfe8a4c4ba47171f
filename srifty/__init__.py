"""srifty: which cloud VMs to rent for data-parallel PyTorch training.

Importing this package is cheap (no torch, scikit-learn or boto3). The explicit
profiling API below is a no-op unless the script runs under ``srifty profile``:

    import srifty
    for batch in loader:
        ...
        optimizer.step()
        srifty.step()          # marks the end of one training iteration

or, equivalently, ``with srifty.iteration(): ...`` around one iteration.

On a mix of instance types with a different per-worker batch on each (``srifty recommend``),
``srifty.local_batch_size(default)`` is the batch this worker should use and
``srifty.weight_gradients_by_batch(ddp_model, batch)`` makes DDP's gradient that of the whole
global batch (srifty.training, docs/training.md).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__version__ = "0.1.0"

from srifty.training import local_batch_size, weight_gradients_by_batch  # no torch import until called

__all__ = ["__version__", "step", "iteration", "local_batch_size", "weight_gradients_by_batch"]


def step() -> None:
    """Mark the end of one training iteration (no-op outside ``srifty profile``).

    Scripts profiled without code change do not need this: srifty finds iteration
    boundaries from DDP's forward calls and the optimizer's ``step``. Call it when the
    script's loop is unusual (several models, no DDP wrapper, gradient accumulation
    done by hand) to tell srifty exactly where an iteration ends.
    """
    from srifty.profiling import instrument

    recorder = instrument.active_recorder()
    if recorder is not None:
        recorder.explicit_step()


@contextlib.contextmanager
def iteration() -> Iterator[None]:
    """Context manager form of :func:`step`: the block is one training iteration."""
    from srifty.profiling import instrument

    recorder = instrument.active_recorder()
    if recorder is not None:
        recorder.explicit_begin()
    yield
    if recorder is not None:
        recorder.explicit_step()
