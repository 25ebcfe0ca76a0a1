"""The digits MLP in jax, for `cargo xtask bench xla`: what ember's xla accelerator is measured
against. One jitted train step (forward, mean cross-entropy, gradients, optax's Adam), the
1437 training images of the stratified split's size in shuffled batches with the last partial
batch kept (as ember's loader does), on jax's CPU (XLA's CPU client, the same compiler as
ember's PJRT plugin).

    python jax_mlp.py --hidden 256,256 --batch 64 --epochs 20

Runs a first fit (it compiles the programs), then a timed fit, and prints one JSON line:
steps, seconds of the timed fit, its CPU seconds on the thread that ran it and on the whole
process (XLA's threads included), programs compiled and their seconds in the first fit.
"""

import argparse
import gzip
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

TRAIN_IMAGES = 1437
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **_: compiles.append(seconds) if event == COMPILE_EVENT else None
)


def load():
    path = Path(__file__).resolve().parents[1] / "data" / "digits.csv.gz"
    rows = np.loadtxt(gzip.open(path, "rt"), delimiter=",", dtype=np.float32)
    return rows[:TRAIN_IMAGES, :64] / 16.0, rows[:TRAIN_IMAGES, 64].astype(np.int32)


def init(key, widths):
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        key, sub = jax.random.split(key)
        bound = 1.0 / np.sqrt(fan_in)
        w = jax.random.uniform(sub, (fan_in, fan_out), jnp.float32, -bound, bound)
        params.append((w, jnp.zeros((fan_out,), jnp.float32)))
    return params


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


def train_step(optimizer):
    """The jitted step, made once per process so that later fits reuse its programs."""

    @jax.jit
    def step(params, state, xb, yb):
        value, grads = jax.value_and_grad(loss)(params, xb, yb)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return step


def fit(widths, batch, epochs, optimizer, step, x, y, seed):
    params = init(jax.random.PRNGKey(seed), widths)
    state = optimizer.init(params)
    rng = np.random.default_rng(seed)
    steps = 0
    start = time.perf_counter()
    cpu = time.thread_time(), time.process_time()
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for at in range(0, len(x), batch):
            take = order[at : at + batch]
            params, state, value = step(params, state, x[take], y[take])
            steps += 1
    jax.block_until_ready((params, value))
    seconds = time.perf_counter() - start
    return steps, seconds, time.thread_time() - cpu[0], time.process_time() - cpu[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    args = parser.parse_args()
    widths = [64] + [int(w) for w in args.hidden.split(",")] + [10]
    x, y = load()
    optimizer = optax.adam(1e-3)
    step = train_step(optimizer)
    fit(widths, args.batch, args.epochs, optimizer, step, x, y, seed=1)
    first = list(compiles)
    steps, seconds, host_cpu, process_cpu = fit(
        widths, args.batch, args.epochs, optimizer, step, x, y, seed=2
    )
    print(
        json.dumps(
            {
                "steps": steps,
                "seconds": seconds,
                "host_cpu_seconds": host_cpu,
                "process_cpu_seconds": process_cpu,
                "first_fit_compiles": len(first),
                "first_fit_compile_seconds": sum(first),
                "timed_fit_compiles": len(compiles) - len(first),
                "jax": jax.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
