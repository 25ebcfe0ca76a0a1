"""The PyTorch side of `cargo xtask bench convs`: the forward and backward pass of each
convolution of the conv example's ResNet, timed alone, as autograd runs them in training.

    python convs.py BATCH REPS

Each rep runs a layer's forward pass (the graph recorded) and then its backward pass from a
fixed output gradient, which computes the weight's gradient and, for every layer but the
first (whose input is the images), the input's; REPS reps after three warm-up reps. The last
line printed is one JSON object, {"layers": [{"name", "forward_ms", "backward_ms"}, ...]},
each time the fastest of the REPS in milliseconds. LAYERS mirrors
examples/conv/benches/convs.rs. Threads: torch.set_num_threads(2), as every contender of the
models bench gets.
"""

import json
import sys
import time

import torch

# (name, in channels, out channels, kernel, stride, padding, input side, input takes a gradient)
LAYERS = [
    ("stem 3->32 3x3 32x32", 3, 32, 3, 1, 1, 32, False),
    ("block 32->32 3x3 32x32", 32, 32, 3, 1, 1, 32, True),
    ("down 32->64 3x3 s2 32x32", 32, 64, 3, 2, 1, 32, True),
    ("shortcut 32->64 1x1 s2 32x32", 32, 64, 1, 2, 0, 32, True),
    ("block 64->64 3x3 16x16", 64, 64, 3, 1, 1, 16, True),
]

# Reps before the clock starts: torch's first calls of a shape allocate its buffers.
WARM_UP = 3


def main():
    batch, reps = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(2)
    torch.manual_seed(0)
    layers = []
    for name, c_in, c_out, k, s, p, side, x_grad in LAYERS:
        x = torch.randn(batch, c_in, side, side, requires_grad=x_grad)
        w = torch.randn(c_out, c_in, k, k, requires_grad=True)
        out = (side + 2 * p - k) // s + 1
        dy = torch.randn(batch, c_out, out, out)
        best = [float("inf"), float("inf")]
        for rep in range(WARM_UP + reps):
            x.grad, w.grad = None, None
            start = time.perf_counter()
            y = torch.nn.functional.conv2d(x, w, None, s, p)
            forward = time.perf_counter() - start
            start = time.perf_counter()
            y.backward(dy)
            backward = time.perf_counter() - start
            if rep >= WARM_UP:
                best = [min(best[0], forward), min(best[1], backward)]
        layers.append({"name": name, "forward_ms": best[0] * 1e3, "backward_ms": best[1] * 1e3})
    print(json.dumps({"layers": layers}))


if __name__ == "__main__":
    main()
