#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine that has no Rust toolchain: the
# digits binary and the precision benchmark with the cpu and cuda accelerators and without
# MPI (the GPU machine has no OpenMPI), stripped and packed as target/gpu/ember-gpu.tar.gz
# (≈25 MB; ignored by git, so carry it: the device tool's `carry: ["target/gpu"]`, 64 MiB at
# most). Both binaries load libcuda at run time and link nothing but libc, libm and libgcc_s.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/ember-target}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
features=(-p digits --no-default-features --features cpu,cuda)
cargo build --release "${features[@]}" --bin digits
bench=$(cargo build --release "${features[@]}" --bench precision --message-format=json \
    | sed -n 's/.*"executable":"\([^"]*precision[^"]*\)".*/\1/p' | tail -1)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
strip -o "$stage/digits" "$CARGO_TARGET_DIR/release/digits"
strip -o "$stage/precision" "$bench"
mkdir -p target/gpu
tar -czf target/gpu/ember-gpu.tar.gz -C "$stage" digits precision
ls -l target/gpu
