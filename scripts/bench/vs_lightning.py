"""The PyTorch side of `cargo xtask bench vs-lightning`, `cargo xtask bench models` and the GPU
benchmark (examples/digits/benches/gpu.rs): one run of a digits task by a hand-written PyTorch
loop (`torch-hand`) or by PyTorch Lightning's Trainer (`lightning`).

    python vs_lightning.py torch-hand|lightning DATA_DIR HIDDEN BATCH EPOCHS [--no-val]
        [--device cpu|cuda] [--precision 32-true|bf16-mixed]
        [--model mlp|cnn|resnet] [--lr LR] [--lr-decay FACTOR] [--setting=defaults|bare]

`--model mlp` (the default) is the digits MLP with hidden widths HIDDEN, e.g. 256,256;
`--model cnn` is the conv example's CNN (HIDDEN is its two channel counts, e.g. 16,32): conv
3x3 pad 1, batch norm, ReLU, twice, a 2x2 max pool, dropout 0.25, a linear classifier;
`--model resnet` is the conv example's ResNet on 32x32 RGB images (HIDDEN is its width, e.g.
32; rows of 3072 pixels, channels first): a bias-free 3x3 stem with batch norm and ReLU, two
residual blocks at that width, a strided one to twice it (its shortcut a strided 1x1 convolution
with batch norm), global average pooling, a linear classifier. Adam at
`--lr` (default 1e-3), multiplied by `--lr-decay` after every epoch (default 1: constant).
`--setting=bare` turns Lightning's logger, checkpointing and model summary off (compute alone).

DATA_DIR holds the split the Rust side wrote (train_x.f32, train_y.u8, val_x.f32, val_y.u8:
little-endian, pixels already scaled to 0..1), so every contender trains on the same 80/20
split. The last line printed is one JSON object:
steps, train_s (fit time less validation time, as the Rust contenders measure it), val_acc.
Threads: torch.set_num_threads(2), the same two threads every contender gets.

With `--device cuda` the model trains on GPU 0 (batches copied from the host each step, as the
Rust contenders do), bf16-mixed runs under torch.autocast, and the clock starts after the first
epoch (cuBLAS heuristics and allocator warm-up), so steps and train_s count the later epochs.
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


def load(data_dir, pixels):
    def read(name, dtype, width):
        values = np.fromfile(os.path.join(data_dir, name), dtype=dtype)
        return values.reshape(-1, width) if width > 1 else values

    train_x = torch.from_numpy(read("train_x.f32", "<f4", pixels).copy())
    train_y = torch.from_numpy(read("train_y.u8", "u1", 1).astype(np.int64))
    val_x = torch.from_numpy(read("val_x.f32", "<f4", pixels).copy())
    val_y = torch.from_numpy(read("val_y.u8", "u1", 1).astype(np.int64))
    return train_x, train_y, val_x, val_y


def mlp(hidden):
    layers, width = [], 64
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def cnn(channels):
    c1, c2 = channels

    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]

    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        *block(1, c1),
        *block(c1, c2),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(c2 * 4 * 4, 10),
    )


def resnet(widths):
    (w,) = widths

    def conv3(c_in, c_out, stride=1):
        return nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)

    class Residual(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1, self.norm1 = conv3(c_in, c_out, stride), nn.BatchNorm2d(c_out)
            self.conv2, self.norm2 = conv3(c_out, c_out), nn.BatchNorm2d(c_out)
            self.shortcut = nn.Identity()
            if stride != 1 or c_in != c_out:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
                )

        def forward(self, x):
            y = torch.relu(self.norm1(self.conv1(x)))
            return torch.relu(self.norm2(self.conv2(y)) + self.shortcut(x))

    return nn.Sequential(
        nn.Unflatten(1, (3, 32, 32)),
        conv3(3, w),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        Residual(w, w, 1),
        Residual(w, w, 1),
        Residual(w, 2 * w, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * w, 10),
    )


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def bare_settings(bare):
    """The Trainer arguments of the bench's bare setting: no logger, no checkpoints, no model
    summary (none when `bare` is false: Lightning's defaults)."""
    if not bare:
        return {}
    return {"logger": False, "enable_checkpointing": False, "enable_model_summary": False}


def val_clock():
    """A Lightning callback that adds up the time spent validating (the sanity check included)
    in `seconds`, to leave out of train_s (char_lm.py uses it too)."""
    import lightning as L

    class ValClock(L.Callback):
        def __init__(self):
            self.seconds, self.started = 0.0, None

        def on_validation_start(self, trainer, module):
            self.started = time.perf_counter()

        def on_validation_end(self, trainer, module):
            self.seconds += time.perf_counter() - self.started

    return ValClock()


def torch_hand(data, build, batch, epochs, validate, device, precision, lr, decay, bare=False):
    train_x, train_y, val_x, val_y = data
    model = build().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=decay)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(SEED)
    mixed = precision == "bf16-mixed"
    steps, val_s, val_acc = 0, 0.0, float("nan")
    start, first = time.perf_counter(), 0
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=generator)
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            x, y = train_x[idx].to(device), train_y[idx].to(device)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=mixed):
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
        scheduler.step()
        if validate:
            v = time.perf_counter()
            model.eval()
            val_acc = accuracy(model, val_x.to(device), val_y.to(device))
            val_s += time.perf_counter() - v
        if device == "cuda" and epoch == 0:
            synchronize(device)
            start, first = time.perf_counter(), steps
    synchronize(device)
    total = time.perf_counter() - start
    return steps - first, total - val_s, val_acc


def lightning_fit(data, build, batch, epochs, validate, device, precision, lr, decay, bare=False):
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    train_x, train_y, val_x, val_y = data

    class Digits(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = build()
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, b, _):
            x, y = b
            loss = self.loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, b, _):
            x, y = b
            logits = self.net(x)
            self.log("val_loss", self.loss(logits, y))
            self.log("val_acc", (logits.argmax(1) == y).float().mean())

        def configure_optimizers(self):
            optimizer = torch.optim.Adam(self.parameters(), lr=lr)
            scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=decay)
            return [optimizer], [scheduler]

    class AfterFirstEpoch(L.Callback):
        """On a GPU, the clock and step count at the end of the first epoch."""

        def __init__(self):
            self.start, self.steps = None, 0

        def on_train_epoch_end(self, trainer, module):
            if device == "cuda" and self.start is None:
                synchronize(device)
                self.start, self.steps = time.perf_counter(), trainer.global_step

    L.seed_everything(SEED, verbose=False)
    train = DataLoader(TensorDataset(train_x, train_y), batch_size=batch, shuffle=True)
    val = DataLoader(TensorDataset(val_x, val_y), batch_size=batch)
    clock, after_first = val_clock(), AfterFirstEpoch()
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(
            accelerator="gpu" if device == "cuda" else "cpu",
            devices=1,
            precision=precision,
            max_epochs=epochs,
            enable_progress_bar=False,
            limit_val_batches=1.0 if validate else 0,
            callbacks=[clock, after_first],
            default_root_dir=root,
            **bare_settings(bare),
        )
        module = Digits()
        start = time.perf_counter()
        trainer.fit(module, train, val)
        synchronize(device)
        total = time.perf_counter() - start
        val_acc = float(trainer.callback_metrics.get("val_acc", float("nan")))
        if after_first.start is not None:
            return trainer.global_step - after_first.steps, time.perf_counter() - after_first.start, val_acc
        return trainer.global_step, total - clock.seconds, val_acc


def main():
    contender, data_dir, hidden, batch, epochs = sys.argv[1:6]
    options = sys.argv[6:]
    validate = "--no-val" not in options

    def option(name, default):
        return options[options.index(name) + 1] if name in options else default

    device, precision = option("--device", "cpu"), option("--precision", "32-true")
    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    widths = [int(h) for h in hidden.split(",")]
    model = option("--model", "mlp")
    build = {
        "mlp": lambda: mlp(widths),
        "cnn": lambda: cnn(widths),
        "resnet": lambda: resnet(widths),
    }[model]
    pixels = 3 * 32 * 32 if model == "resnet" else 64
    lr, decay = float(option("--lr", "1e-3")), float(option("--lr-decay", "1"))
    run = {"torch-hand": torch_hand, "lightning": lightning_fit}[contender]
    steps, train_s, val_acc = run(
        load(data_dir, pixels), build, int(batch), int(epochs), validate, device, precision, lr, decay,
        bare="--setting=bare" in options,
    )
    val_acc = None if val_acc != val_acc else val_acc  # NaN (no validation) is JSON's null
    print(json.dumps({"steps": steps, "train_s": train_s, "val_acc": val_acc}))


if __name__ == "__main__":
    main()
