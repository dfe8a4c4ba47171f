"""A tiny DDP job with a communication hook registered as its argument says: DDP's builtin
FP16_COMPRESS (C++, which srifty cannot wrap), the Python fp16_compress_hook, PowerSGD, or none
(any other word). Optional second and third arguments: the MLP's width (256) and DDP's
bucket_cap_mb (DDP's default)."""
import sys

import torch.distributed as dist
from _tiny import tiny_ddp, train_step
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

kind = sys.argv[1]
model, opt, batch, rank = tiny_ddp(*(int(a) for a in sys.argv[2:3]), *(float(a) for a in sys.argv[3:4]))
if kind == "builtin-fp16":
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
elif kind == "fp16":
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
elif kind == "powersgd":
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
for i in range(100000):
    train_step(model, opt, batch)
