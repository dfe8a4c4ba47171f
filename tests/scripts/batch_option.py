"""A script that takes its batch as an option, as HuggingFace's example scripts do
(--per_device_train_batch_size, required), and reads no SRIFTY_BATCH_SIZE; it trains --steps
steps and prints the batch it trained at."""
import argparse

import torch.distributed as dist

from _tiny import tiny_ddp, train_step

parser = argparse.ArgumentParser()
parser.add_argument("--per_device_train_batch_size", type=int, required=True)
parser.add_argument("--steps", type=int, default=100000)
args = parser.parse_args()
model, opt, _, rank = tiny_ddp(width=64)
for _ in range(args.steps):
    train_step(model, opt, args.per_device_train_batch_size)
if rank == 0:
    print(f"trained at a per-worker batch of {args.per_device_train_batch_size}")
dist.destroy_process_group()
