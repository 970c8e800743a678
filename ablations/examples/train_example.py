"""A small training script to ablate with tricklab (docs/scripts.md).

A BatchNorm MLP learns ten noisy clusters of points made from the seed, on
the CPU in a few seconds: no download, nothing but torch. Its tricks are
switched the three ways a script can take them, as
ablations/script-example.toml declares:
  --label-smoothing A   a flag
  EXAMPLE_NESTEROV=1    an environment variable
  WARMUP_EPOCHS         a line of source that a patch changes

It reports through the `tricklab` module (tricklab puts it on PYTHONPATH for
the runs it starts; elsewhere `pip install ./python`), and runs as before
outside tricklab.
"""

import argparse
import os

import torch
import torch.nn.functional as F

import tricklab

WARMUP_EPOCHS = 0

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--label-smoothing", type=float, default=0.0)
args = p.parse_args()

# Decisions up front.
torch.manual_seed(args.seed)
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
nesterov = os.environ.get("EXAMPLE_NESTEROV") == "1"
classes, dim, train_n, test_n, batch = 10, 64, 8000, 2000, 200
lr, momentum, weight_decay = 0.2, 0.9, 5e-4

# Data: ten clusters, overlapping enough that tricks show.
means = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 0.35
def draw(n, g):
    y = torch.randint(0, classes, (n,), generator=g)
    return means[y] + torch.randn(n, dim, generator=g), y
x_train, y_train = draw(train_n, torch.Generator().manual_seed(1))
x_test, y_test = draw(test_n, torch.Generator().manual_seed(2))

model = torch.nn.Sequential(
    torch.nn.Linear(dim, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
    torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
    torch.nn.Linear(256, classes),
)
opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                      nesterov=nesterov, weight_decay=weight_decay)
steps_per_epoch = train_n // batch
total = args.epochs * steps_per_epoch
warmup = WARMUP_EPOCHS * steps_per_epoch
def lr_at(step):
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * (1 - (step - warmup) / max(1, total - warmup))

def accuracy():
    model.eval()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    model.train()
    return acc

tricklab.start(steps=total, epochs=args.epochs)  # for the progress bar and ETA
clock = tricklab.Clock()
step = 0
for epoch in range(args.epochs):
    with clock:  # training only: the evaluation below is outside the clock
        order = torch.randperm(train_n)
        for i in range(steps_per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx],
                                   label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % 10 == 0:
                tricklab.log(step=step, loss=loss, lr=lr_at(step - 1),
                             bn_scale=tricklab.bn_scale(model), images=step * batch)
    acc = accuracy()
    print(f"epoch {epoch + 1} acc {100 * acc:.2f}% train {clock.seconds():.2f}s")
    tricklab.epoch(epoch=epoch + 1, acc=acc, seconds=clock.seconds())
tricklab.final(acc=acc, seconds=clock.seconds())
