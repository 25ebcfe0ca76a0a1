#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: trains digits on cuda for 3 epochs at each precision cuda
# runs (each must print a val_acc), then runs the precision benchmark on cuda, whose last line
# is `bf16-mixed/32-true speed: X.XXx`. Uses the binaries scripts/gpu-bundle.sh packed into
# target/gpu/ember-gpu.tar.gz; needs no Rust toolchain. ROUNDS (default 3) sets the
# benchmark's rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
tar -xzf target/gpu/ember-gpu.tar.gz -C "$bin"
nvidia-smi -L || echo "gpu-check: nvidia-smi is missing; trying anyway" >&2
for precision in 32-true 16-true bf16-true 16-mixed bf16-mixed; do
    dir=$(mktemp -d)
    echo "== digits fit on cuda, $precision"
    (cd "$dir" && "$bin/digits" fit --trainer.accelerator=cuda --trainer.precision="$precision" \
        --trainer.max_epochs=3 --trainer.enable_progress_bar=false)
    rm -rf "$dir"
done
echo "== cargo xtask bench precision ${ROUNDS:-3} --accelerator cuda"
"$bin/precision" "${ROUNDS:-3}" --accelerator cuda
