"""A tiny DDP job with a communication hook registered as its argument says: DDP's builtin
FP16_COMPRESS (C++, which srifty cannot wrap), the Python fp16_compress_hook, or PowerSGD."""
import sys

import torch.distributed as dist
from _tiny import tiny_ddp, train_step
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

model, opt, batch, rank = tiny_ddp()
kind = sys.argv[1]
if kind == "builtin-fp16":
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
elif kind == "fp16":
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
elif kind == "powersgd":
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
for i in range(100000):
    train_step(model, opt, batch)
