"""Rank 1 stops (sleeps forever) after 30 iterations; rank 0 blocks in the allreduce."""
import time
from _tiny import tiny_ddp, train_step

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    train_step(model, opt, batch)
    if rank == 1 and i == 30:
        while True:
            time.sleep(1)
