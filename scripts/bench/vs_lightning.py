"""The PyTorch side of `cargo xtask bench vs-lightning`: one run of the digits task by a
hand-written PyTorch loop (`torch-hand`) or by PyTorch Lightning's Trainer (`lightning`).

    python vs_lightning.py torch-hand|lightning DATA_DIR HIDDEN BATCH EPOCHS [--no-val]

DATA_DIR holds the split the Rust side wrote (train_x.f32, train_y.u8, val_x.f32, val_y.u8:
little-endian, pixels already scaled to 0..1), so every contender trains on the same 80/20
split. HIDDEN is the hidden widths, e.g. 256,256. The last line printed is one JSON object:
steps, train_s (fit time less validation time, as the Rust contenders measure it), val_acc.
Threads: torch.set_num_threads(2), the same two threads every contender gets.
"""

import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

THREADS = 2
SEED = 42
LR = 1e-3


def load(data_dir):
    def read(name, dtype, width):
        values = np.fromfile(os.path.join(data_dir, name), dtype=dtype)
        return values.reshape(-1, width) if width > 1 else values

    train_x = torch.from_numpy(read("train_x.f32", "<f4", 64).copy())
    train_y = torch.from_numpy(read("train_y.u8", "u1", 1).astype(np.int64))
    val_x = torch.from_numpy(read("val_x.f32", "<f4", 64).copy())
    val_y = torch.from_numpy(read("val_y.u8", "u1", 1).astype(np.int64))
    return train_x, train_y, val_x, val_y


def mlp(hidden):
    layers, width = [], 64
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def torch_hand(data, hidden, batch, epochs, validate):
    train_x, train_y, val_x, val_y = data
    model = mlp(hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(SEED)
    steps, val_s, val_acc = 0, 0.0, float("nan")
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=generator)
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            steps += 1
        if validate:
            v = time.perf_counter()
            model.eval()
            val_acc = accuracy(model, val_x, val_y)
            val_s += time.perf_counter() - v
    total = time.perf_counter() - start
    return steps, total - val_s, val_acc


def lightning_fit(data, hidden, batch, epochs, validate):
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    train_x, train_y, val_x, val_y = data

    class Digits(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.mlp = mlp(hidden)
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, b, _):
            x, y = b
            loss = self.loss(self.mlp(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, b, _):
            x, y = b
            logits = self.mlp(x)
            self.log("val_loss", self.loss(logits, y))
            self.log("val_acc", (logits.argmax(1) == y).float().mean())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=LR)

    class ValClock(L.Callback):
        """Time spent validating (the sanity check included), to leave out of train_s."""

        def __init__(self):
            self.seconds, self.started = 0.0, None

        def on_validation_start(self, trainer, module):
            self.started = time.perf_counter()

        def on_validation_end(self, trainer, module):
            self.seconds += time.perf_counter() - self.started

    L.seed_everything(SEED, verbose=False)
    train = DataLoader(TensorDataset(train_x, train_y), batch_size=batch, shuffle=True)
    val = DataLoader(TensorDataset(val_x, val_y), batch_size=batch)
    clock = ValClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            enable_progress_bar=False,
            limit_val_batches=1.0 if validate else 0,
            callbacks=[clock],
            default_root_dir=root,
        )
        module = Digits()
        start = time.perf_counter()
        trainer.fit(module, train, val)
        total = time.perf_counter() - start
        val_acc = float(trainer.callback_metrics.get("val_acc", float("nan")))
        return trainer.global_step, total - clock.seconds, val_acc


def main():
    contender, data_dir, hidden, batch, epochs = sys.argv[1:6]
    validate = "--no-val" not in sys.argv[6:]
    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    hidden = [int(h) for h in hidden.split(",")]
    run = {"torch-hand": torch_hand, "lightning": lightning_fit}[contender]
    steps, train_s, val_acc = run(load(data_dir), hidden, int(batch), int(epochs), validate)
    val_acc = None if val_acc != val_acc else val_acc  # NaN (no validation) is JSON's null
    print(json.dumps({"steps": steps, "train_s": train_s, "val_acc": val_acc}))


if __name__ == "__main__":
    main()
