#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, PyTorch and Lightning: ember on cuda beside a hand-written
# burn-cuda loop, PyTorch Lightning and a hand-written PyTorch loop, in 32-true and bf16-mixed
# (examples/digits/benches/gpu.rs), from the bundle scripts/gpu-bundle.sh packed. Its last line
# is `bf16-mixed/32-true (ember, matmul-bound): X.XXx`. ROUNDS (default 3); PYTHON (default
# python3) must import torch and lightning.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
tar -xJf target/gpu/ember-gpu.tar.xz -C "$bin"
"$bin/gpu" "${ROUNDS:-3}" --python "${PYTHON:-python3}"
