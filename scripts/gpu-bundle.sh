#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh and scripts/gpu-bench.sh run on a GPU machine that has no
# Rust toolchain, with the cpu, cuda and xla accelerators and without MPI (the GPU machine has
# no OpenMPI): the digits binary, the precision and gpu benchmarks, and the test binaries that
# skip without a GPU (ember-accel-cuda's NCCL and NVML tests; digits' ACCEPTANCE 27 and 29 on
# cuda; ember-accel-tpu-xla's two-node bootstrap on XLA's GPU plugin), stripped and packed
# with the PyTorch side of the gpu benchmark as
# target/gpu/ember-gpu.tar.xz (ignored by git, so carry it: the device tool's
# `carry: ["target/gpu"]`, 64 MiB at most). The binaries load libcuda, NCCL and NVML at run
# time and link nothing but libc, libm and libgcc_s.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/ember-target}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
features=(--no-default-features --features cpu,cuda,tpu-xla)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# The executables one cargo invocation builds, as "name path" lines.
executables() {
    cargo "$@" --message-format=json \
        | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p'
}
# The test harnesses one `cargo test --no-run` builds: those it names, not the binaries they
# run (a `--tests` build would add every test target of the package).
test_executables() {
    cargo test --release --no-run "$@" --message-format=json | grep '"profile":{[^}]*"test":true' \
        | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p'
}
cargo build --release -p digits "${features[@]}" --bin digits
strip -o "$stage/digits" "$CARGO_TARGET_DIR/release/digits"
while read -r name path; do
    strip -o "$stage/$name" "$path"
done < <(executables build --release -p digits "${features[@]}" --bench precision --bench gpu)
while read -r name path; do
    strip -o "$stage/test-$name" "$path"
done < <(test_executables -p digits "${features[@]}" --test trainer_vs_hand --test resume;
         test_executables -p ember-accel-cuda --lib;
         test_executables -p ember-accel-tpu-xla --test hosts)
cp scripts/bench/vs_lightning.py "$stage/"
mkdir -p target/gpu
# xz: gzip made 65 MiB of these 250 MB, over what the device tool carries; xz makes ~42 MiB.
rm -f target/gpu/ember-gpu.tar.gz
tar -cf - -C "$stage" . | xz -6 -T2 > target/gpu/ember-gpu.tar.xz
ls -l target/gpu
