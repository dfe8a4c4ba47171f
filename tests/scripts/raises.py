"""Trains 3 iterations, then every rank raises a ValueError."""
from _tiny import tiny_ddp, train_step

model, opt, batch, rank = tiny_ddp()
for i in range(100000):
    train_step(model, opt, batch)
    if i == 3:
        raise ValueError("bad learning-rate schedule in the user's script")
