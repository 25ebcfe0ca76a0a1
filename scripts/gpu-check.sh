#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the binaries scripts/gpu-bundle.sh packed into
# target/gpu/ember-gpu.tar.xz (no Rust toolchain needed):
#  1. the tests that skip without a GPU: NCCL on one rank (init, all-reduce of burn's buffer,
#     broadcast, destroy), NVML's device stats, ACCEPTANCE 27 and 29 on cuda;
#  2. digits on cuda for 3 epochs at each precision cuda runs (each prints its val_acc);
#  3. a full digits fit under ddp with one rank whose gradients go through NCCL;
#  4. digits on xla for 3 epochs through XLA's GPU plugin (jax's CUDA PJRT plugin, found in
#     the site-packages of the first python3 on PATH; test-hosts, in step 1, bootstraps two
#     nodes of it through ember's key-value store);
#  5. the precision benchmark on cuda (last line `bf16-mixed/32-true speed: X.XXx`).
# NCCL comes from pip's nvidia-nccl wheel (PYTHON, default python3, must import it): that
# wheel ships only libnccl.so.2, so a libnccl.so link to it goes on LD_LIBRARY_PATH.
# ROUNDS (default 3) sets the benchmark's rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
tar -xJf target/gpu/ember-gpu.tar.xz -C "$bin"
nvidia-smi -L || echo "gpu-check: nvidia-smi is missing; trying anyway" >&2
nccl=$("${PYTHON:-python3}" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
if [ -n "$nccl" ] && [ -e "$nccl/libnccl.so.2" ]; then
    mkdir -p "$bin/lib" && ln -sf "$nccl/libnccl.so.2" "$bin/lib/libnccl.so"
    export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: NCCL from $nccl"
else
    echo "gpu-check: no nvidia-nccl wheel found for ${PYTHON:-python3}; the NCCL steps will fail" >&2
fi
for test in "$bin"/test-*; do
    echo "== $(basename "$test")"
    "$test" --nocapture --test-threads=1
done
for precision in 32-true 16-true bf16-true 16-mixed bf16-mixed; do
    dir=$(mktemp -d)
    echo "== digits fit on cuda, $precision"
    (cd "$dir" && "$bin/digits" fit --trainer.accelerator=cuda --trainer.precision="$precision" \
        --trainer.max_epochs=3 --trainer.enable_progress_bar=false)
    rm -rf "$dir"
done
dir=$(mktemp -d)
echo "== digits fit on cuda under ddp, one rank, gradients through NCCL"
(cd "$dir" && RUST_LOG=ember=debug "$bin/digits" fit --trainer.accelerator=cuda \
    --trainer.strategy=ddp --trainer.devices=1 --trainer.plugins='[nccl]' \
    --trainer.max_epochs=3 --trainer.enable_progress_bar=false --print-plan) 2>&1 \
    | grep -v "^DEBUG" | head -5
(cd "$dir" && RUST_LOG=ember=debug "$bin/digits" fit --trainer.accelerator=cuda \
    --trainer.strategy=ddp --trainer.devices=1 --trainer.plugins='[nccl]' \
    --trainer.max_epochs=3 --trainer.enable_progress_bar=false) 2>&1 \
    | grep -E "through nccl|val_acc|error" | tail -5
rm -rf "$dir"
dir=$(mktemp -d)
echo "== digits fit on xla through XLA's GPU plugin"
if ! (cd "$dir" && "$bin/digits" fit --trainer.accelerator=xla --trainer.max_epochs=3 \
    --trainer.enable_progress_bar=false); then
    echo "gpu-check: digits on xla failed (is jax's CUDA plugin installed for the python3 on PATH?)" >&2
fi
rm -rf "$dir"
echo "== cargo xtask bench precision ${ROUNDS:-3} --accelerator cuda"
"$bin/precision" "${ROUNDS:-3}" --accelerator cuda
