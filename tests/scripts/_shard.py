"""A helper module that shards a model with FSDP2 (or FSDP, version 1), as a trainer or a project's
own code does out of sight of the training script."""
from torch.distributed.fsdp import fully_shard


def shard(model, version=2):
    if version == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model)  # needs an accelerator: on a CPU, torch refuses it here
    fully_shard(model)
    return model
