"""Slow iterations (0.2 s sleep each): gives a test time to interrupt the run."""
import time
from _tiny import tiny_ddp, train_step

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    train_step(model, opt, batch)
    time.sleep(0.2)
