"""The PyTorch side of `cargo xtask bench convs`: the forward and backward pass of each
convolution of the conv example's ResNet, timed alone, as autograd runs them in training.

    python convs.py BATCH REPS LAYERS

LAYERS is a JSON list from the Rust side, one [name, in channels, out channels, kernel, stride,
padding, input side, input takes a gradient] per convolution.

Each rep runs a layer's forward pass (the graph recorded) and then its backward pass from a
fixed output gradient, which computes the weight's gradient and, where the input takes one,
the input's; REPS reps after three warm-up reps. The last line printed is one JSON object,
{"layers": [{"name", "forward_ms", "backward_ms"}, ...]}, each time the fastest of the REPS in
milliseconds. Threads: torch.set_num_threads(2), as every contender of the models bench gets.
"""

import json
import sys
import time

import torch

# Reps before the clock starts: torch's first calls of a shape allocate its buffers.
WARM_UP = 3


def main():
    batch, reps, given = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    torch.set_num_threads(2)
    torch.manual_seed(0)
    layers = []
    for name, c_in, c_out, k, s, p, side, x_grad in given:
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
