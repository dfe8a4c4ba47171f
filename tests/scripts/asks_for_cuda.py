"""A GPU script as many are written: its model goes to CUDA whether or not the machine has one."""
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(nn.Linear(64, 10).cuda())
