//! The cpu accelerator's kernels are chosen at run time: burn-flex is built with gemm's AVX-512
//! micro-kernels (`x86-v4`), which gemm uses only where the CPU reports AVX-512, so the same
//! binary trains on a CPU without it (AVX2 kernels there). Checked by running digits under
//! qemu's user-mode emulation of a Haswell CPU (AVX2 and FMA, no AVX-512).

use std::process::Command;

const QEMU: &str = "qemu-x86_64";

#[test]
#[cfg(target_arch = "x86_64")]
fn digits_trains_on_an_emulated_cpu_without_avx512() {
    if Command::new(QEMU).arg("--version").output().is_err() {
        eprintln!(
            "skipped: {QEMU} is not installed (scripts/setup.sh installs Debian's qemu-user)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(QEMU)
        .args(["-cpu", "Haswell", env!("CARGO_BIN_EXE_digits")])
        .args([
            "fit",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=4",
            "--trainer.limit_val_batches=2",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
        ])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "under {QEMU} -cpu Haswell: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("trained 4 steps"), "{stdout}");
}
