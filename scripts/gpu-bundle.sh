#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh and scripts/gpu-bench.sh run on a GPU machine that has no
# Rust toolchain, with the cpu and cuda accelerators and without MPI (the GPU machine has no
# OpenMPI): the digits binary, the precision and gpu benchmarks, and the test binaries that
# skip without a GPU (ember-accel-cuda's NCCL and NVML tests; digits' ACCEPTANCE 27 and 29 on
# cuda), stripped and packed with the PyTorch side of the gpu benchmark as
# target/gpu/ember-gpu.tar.gz (ignored by git, so carry it: the device tool's
# `carry: ["target/gpu"]`, 64 MiB at most). The binaries load libcuda, NCCL and NVML at run
# time and link nothing but libc, libm and libgcc_s.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/ember-target}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
features=(--no-default-features --features cpu,cuda)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# The executables one cargo invocation builds, as "name path" lines.
executables() {
    cargo build --release "$@" --message-format=json \
        | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p'
}
cargo build --release -p digits "${features[@]}" --bin digits
strip -o "$stage/digits" "$CARGO_TARGET_DIR/release/digits"
while read -r name path; do
    strip -o "$stage/$name" "$path"
done < <(executables -p digits "${features[@]}" --bench precision --bench gpu)
while read -r name path; do
    strip -o "$stage/test-$name" "$path"
done < <(executables --tests -p digits "${features[@]}" --test trainer_vs_hand --test resume;
         executables --tests -p ember-accel-cuda --lib)
cp scripts/bench/vs_lightning.py "$stage/"
mkdir -p target/gpu
tar -czf target/gpu/ember-gpu.tar.gz -C "$stage" .
ls -l target/gpu
