#!/usr/bin/env bash
# Installs what ember's build and tests need beyond a fresh machine's Rust toolchain.
# Idempotent and quick when everything is already there; called by `cargo xtask` and CI.
set -euo pipefail

# The system packages ember's `mpi` feature needs in a user's own program (OpenMPI's library
# and mpirun, libclang for bindgen); `scripts/setup.sh --mpi` installs only these.
mpi_packages=(libopenmpi-dev openmpi-bin libclang-dev)
# What the `wgpu` feature needs at run time: the Vulkan loader and mesa's drivers.
wgpu_packages=(libvulkan1 mesa-vulkan-drivers)

# Installs those of the given Debian packages that are missing.
install_missing() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "setup: installing ${missing[*]}"
        local sudo_cmd=()
        [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
        export DEBIAN_FRONTEND=noninteractive
        "${sudo_cmd[@]}" apt-get update -qq
        "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# Installs the pip requirements `$2` (words) into a venv of their own at `$1`, unless it already
# holds exactly them (its ember-pin.txt) and `import $3` works there.
pinned_venv() {
    local venv=$1 pins=$2 modules=$3
    if [ "$(cat "$venv/ember-pin.txt" 2>/dev/null)" != "$pins" ] \
        || ! "$venv/bin/python" -c "import $modules" 2>/dev/null; then
        echo "setup: installing $pins into $venv (pip)"
        rm -rf "$venv"
        python3 -m venv "$venv"
        # shellcheck disable=SC2086 # the pins are words
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pins
        echo "$pins" > "$venv/ember-pin.txt"
    fi
}

# XLA's CPU PJRT plugin, for the xla accelerator's tests and `cargo xtask bench xla`: the pinned
# wheel's library, unpacked into a cache dir outside the clone, where ember looks for it
# (crates/accel-tpu-xla/src/pjrt/plugin.rs). `pip download --no-deps` installs nothing; ~63 MB
# to download once, checked against its SHA-256. The wheel is XLA's CPU plugin built from the
# XLA of jaxlib 0.11.2 (PJRT C API 0.115); it runs ember's programs 5-20% faster than the
# `xla-cpu-pjrt` 0.0.1 wheel pinned before it (docs/xla.md).
fetch_xla_plugin() {
    xla_pin="lammps-jax-pjrt-cpu==0.11.2"
    xla_sha256="1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1"
    xla_member="lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"
    xla_cache="${EMBER_XLA_CACHE:-$HOME/.cache/ember-xla}"
    if [ ! -f "$xla_cache/xla_cpu_pjrt.so" ] || [ "$(cat "$xla_cache/pin.txt" 2>/dev/null)" != "$xla_pin" ]; then
        echo "setup: fetching XLA's CPU PJRT plugin ($xla_pin) into $xla_cache (pip download)"
        tmp="$(mktemp -d)"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps "$xla_pin" -d "$tmp"
        python3 - "$tmp" "$xla_sha256" "$xla_member" <<'PY'
import glob, hashlib, sys, zipfile
tmp, sha256, member = sys.argv[1:]
wheel = glob.glob(tmp + "/*.whl")[0]
digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
if digest != sha256:
    sys.exit(f"setup: {wheel} has SHA-256 {digest}, expected {sha256}")
zipfile.ZipFile(wheel).extract(member, tmp)
PY
        mkdir -p "$xla_cache"
        mv "$tmp/$xla_member" "$xla_cache/xla_cpu_pjrt.so.partial"
        mv "$xla_cache/xla_cpu_pjrt.so.partial" "$xla_cache/xla_cpu_pjrt.so"
        echo "$xla_pin" > "$xla_cache/pin.txt"
        rm -rf "$tmp"
    fi
}

# What a user's own program needs for one feature, alone: `--mpi` (OpenMPI and libclang),
# `--wgpu` (the Vulkan loader and mesa's drivers, lavapipe included, for machines without a
# GPU driver of their own), `--xla` (XLA's CPU PJRT plugin). `cpu` needs nothing; `cuda` needs
# the NVIDIA driver; `tch` needs LibTorch 2.9.0 (docs/libtorch.md).
case "${1:-}" in
    --mpi)
        install_missing "${mpi_packages[@]}"
        echo "setup: ok (mpi)"
        exit 0
        ;;
    --wgpu)
        install_missing "${wgpu_packages[@]}"
        echo "setup: ok (wgpu)"
        exit 0
        ;;
    --xla)
        fetch_xla_plugin
        echo "setup: ok (xla)"
        exit 0
        ;;
esac

# Debian packages: mesa's lavapipe (a software Vulkan driver) so the wgpu accelerator runs
# its tests on machines without a GPU; OpenMPI (the ddp engine: mpirun and the library the
# `mpi` crate binds) and libclang (bindgen generates those bindings at build time); SLURM's
# daemons, for the test that trains under a private one-node cluster (scripts/test-slurm.sh);
# qemu's user-mode emulator, to train on an emulated CPU without AVX-512
# (examples/digits/tests/cpu_dispatch.rs); a sans-serif font for curves.png's labels.
packages=("${wgpu_packages[@]}" "${mpi_packages[@]}" slurmctld slurmd qemu-user
    fonts-dejavu-core)
install_missing "${packages[@]}"

# Python's tensorboard package: the tests read ember's TensorBoard event files back with
# TensorBoard's own reader.
if ! python3 -c "import tensorboard" 2>/dev/null; then
    echo "setup: installing tensorboard (pip)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore tensorboard
fi

# Python's safetensors package: a test reads ember's checkpoints with it, as a PyTorch user would.
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
    echo "setup: installing safetensors (pip)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore safetensors numpy
fi

fetch_xla_plugin

# With --torch: the pinned PyTorch and Lightning (scripts/torch-pins.txt) in a venv outside the
# clone, for the LibTorch accelerators (their build and tests) and the benchmark against
# Lightning. ~4.1 GB to download the first time (torch's wheel brings CUDA's libraries); reused
# while its recorded pins match. `cargo xtask` finds it at the same default path.
if [ "${1:-}" = "--torch" ]; then
    venv="${EMBER_TORCH_VENV:-$HOME/.cache/ember-torch/venv}"
    pins="$(dirname "$0")/torch-pins.txt"
    if ! cmp -s "$pins" "$venv/ember-pins.txt" || ! "$venv/bin/python" -c "import torch, lightning" 2>/dev/null; then
        echo "setup: installing $(grep -v '^#' "$pins" | tr '\n' ' ')into $venv (pip; ~4 GB the first time)"
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$pins"
        cp "$pins" "$venv/ember-pins.txt"
    fi
    # The tch row's tests run with the venv's python first on PATH (burn-tch's build asks it for
    # torch's paths), and some tests read ember's files with Python's tensorboard and
    # safetensors packages: the venv has them too.
    if ! "$venv/bin/python" -c "import tensorboard, safetensors, numpy" 2>/dev/null; then
        echo "setup: installing tensorboard, safetensors and numpy into $venv (pip)"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check tensorboard safetensors numpy
    fi
    # torchvision's ImageFolder and transforms, for `cargo xtask bench data`: the release that
    # goes with torch 2.9.0 (scripts/torch-pins.txt), so pip adds it and leaves torch alone.
    if ! "$venv/bin/python" -c "import torchvision" 2>/dev/null; then
        echo "setup: installing torchvision 0.24.0 into $venv (pip)"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check torchvision==0.24.0
    fi
fi

# With --torch too: MLflow (pinned) in a venv of its own, for the MLflow logger's test against a
# real tracking server it starts (`mlflow server`, SQLite backend) and reads back with MLflow's
# own client. ~850 MB and ~40 s the first time; reused while its recorded pin matches.
if [ "${1:-}" = "--torch" ]; then
    pinned_venv "${EMBER_MLFLOW_VENV:-$HOME/.cache/ember-mlflow/venv}" "mlflow[auth]==3.17.2" mlflow
fi

# With --jax: jax and optax (pinned) in a venv of their own, for `cargo xtask bench xla`, which
# trains the same MLPs in jax beside ember's xla accelerator. jax 0.11 and later need Python
# >= 3.12 and this machine's is 3.11, so the pin is jax 0.10.2 (what pip resolves for 3.11).
# ~600 MB and ~10 s the first time; reused while the recorded pins match.
if [ "${1:-}" = "--jax" ]; then
    pinned_venv "${EMBER_JAX_VENV:-$HOME/.cache/ember-jax/venv}" \
        "jax==0.10.2 jaxlib==0.10.2 optax==0.2.8" "jax, optax"
fi

# The pinned toolchain (rust-toolchain.toml) with rustfmt and clippy.
rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
echo "setup: ok"
