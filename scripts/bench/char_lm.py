"""The PyTorch side of `cargo xtask bench models` for the transformer example: one fit of its
character-level language model by a hand-written PyTorch loop (`torch-hand`) or by PyTorch
Lightning's Trainer (`lightning`).

    python char_lm.py torch-hand|lightning DATA_DIR EPOCHS [--setting=defaults|bare]

DATA_DIR holds the windows the Rust side cut (train.u8 and val.u8: rows of CONTEXT + 1 token
ids; meta.json: vocab, context, batch, d_model, heads, layers, mlp_ratio, dropout, lr,
weight_decay, warmup, decay, min_lr_ratio, max_context), so every contender trains on the same
windows and settings: token and position embeddings (normal, std 0.02), pre-norm blocks of
causal multi-head attention and a GELU MLP, tied output weights, AdamW, a linear warm-up then a
cosine decay per step, gradient norm clipped at 1. Validation is one batch of every held-out
window after each epoch. The last line printed is one JSON object: steps, train_s (fit time
less validation time), val_loss. Threads: torch.set_num_threads(2). `--setting=bare` turns
Lightning's logger, checkpointing and model summary off (compute alone).
"""

import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

from vs_lightning import bare_settings, val_clock

THREADS = 2
SEED = 42


def load(data_dir):
    meta = json.load(open(os.path.join(data_dir, "meta.json")))
    width = meta["context"] + 1

    def read(name):
        values = np.fromfile(os.path.join(data_dir, name), dtype="u1").astype(np.int64)
        return torch.from_numpy(values.reshape(-1, width))

    return meta, read("train.u8"), read("val.u8")


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["d_model"]
        self.attention_norm = nn.LayerNorm(d)
        self.attention = nn.MultiheadAttention(d, m["heads"], dropout=m["dropout"], batch_first=True)
        self.mlp_norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d * m["mlp_ratio"]), nn.GELU(), nn.Linear(d * m["mlp_ratio"], d))
        self.dropout = nn.Dropout(m["dropout"])

    def forward(self, x, causal):
        h = self.attention_norm(x)
        x = x + self.dropout(self.attention(h, h, h, attn_mask=causal, need_weights=False)[0])
        return x + self.dropout(self.mlp(self.mlp_norm(x)))


class CharLm(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.tokens = nn.Embedding(m["vocab"], m["d_model"])
        self.positions = nn.Embedding(m["max_context"], m["d_model"])
        for e in (self.tokens, self.positions):
            nn.init.normal_(e.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.norm = nn.LayerNorm(m["d_model"])
        self.dropout = nn.Dropout(m["dropout"])

    def forward(self, ids):
        t = ids.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        x = self.dropout(self.tokens(ids) + self.positions(torch.arange(t)))
        for block in self.blocks:
            x = block(x, causal)
        return self.norm(x) @ self.tokens.weight.T

    def loss(self, window):
        logits = self(window[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))


def optimizer_and_schedule(model, m):
    optimizer = torch.optim.AdamW(model.parameters(), lr=m["lr"], weight_decay=m["weight_decay"])
    peak, floor, warmup, decay = m["lr"], m["lr"] * m["min_lr_ratio"], m["warmup"], m["decay"]

    def rate(step):  # the factor of step + 1, as the Rust schedule's 1-based step
        step += 1
        if step <= warmup:
            return step / warmup
        t = (step - warmup) / max(decay, 1)
        if t >= 1:
            return floor / peak
        return (floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * t))) / peak

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def torch_hand(meta, train, val, epochs, bare):
    model = CharLm(meta)
    optimizer, scheduler = optimizer_and_schedule(model, meta)
    generator = torch.Generator().manual_seed(SEED)
    steps, val_s, val_loss = 0, 0.0, float("nan")
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train), generator=generator)
        for i in range(0, len(order), meta["batch"]):
            optimizer.zero_grad(set_to_none=True)
            loss = model.loss(train[order[i : i + meta["batch"]]])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            steps += 1
        v = time.perf_counter()
        model.eval()
        with torch.no_grad():
            val_loss = model.loss(val).item()
        val_s += time.perf_counter() - v
    return steps, time.perf_counter() - start - val_s, val_loss


def lightning_fit(meta, train, val, epochs, bare):
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = CharLm(meta)

        def training_step(self, b, _):
            loss = self.net.loss(b[0])
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, b, _):
            self.log("val_loss", self.net.loss(b[0]))

        def configure_optimizers(self):
            optimizer, scheduler = optimizer_and_schedule(self.net, meta)
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    L.seed_everything(SEED, verbose=False)
    loaders = (
        DataLoader(TensorDataset(train), batch_size=meta["batch"], shuffle=True),
        DataLoader(TensorDataset(val), batch_size=len(val)),
    )
    clock = val_clock()
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            gradient_clip_val=1.0,
            enable_progress_bar=False,
            callbacks=[clock],
            default_root_dir=root,
            **bare_settings(bare),
        )
        start = time.perf_counter()
        trainer.fit(Module(), *loaders)
        total = time.perf_counter() - start
        val_loss = float(trainer.callback_metrics.get("val_loss", float("nan")))
        return trainer.global_step, total - clock.seconds, val_loss


def main():
    contender, data_dir, epochs = sys.argv[1:4]
    bare = "--setting=bare" in sys.argv[4:]
    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    run = {"torch-hand": torch_hand, "lightning": lightning_fit}[contender]
    steps, train_s, val_loss = run(*load(data_dir), int(epochs), bare)
    print(json.dumps({"steps": steps, "train_s": train_s, "val_loss": val_loss}))


if __name__ == "__main__":
    main()
