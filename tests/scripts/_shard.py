"""A helper module that shards a model with FSDP2, as a trainer or a project's own code does out of
sight of the training script."""
from torch.distributed.fsdp import fully_shard


def shard(model):
    fully_shard(model)
    return model
