"""Rank 1 dies abruptly (os._exit) after 30 iterations; rank 0 is left waiting."""
import os
from _tiny import tiny_ddp, train_step

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    train_step(model, opt, batch)
    if rank == 1 and i == 30:
        os._exit(3)
