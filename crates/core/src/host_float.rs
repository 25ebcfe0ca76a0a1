//! The host's floating-point mode for subnormal numbers (`--trainer.flush_denormal`).
//!
//! A subnormal float (non-zero, smaller in magnitude than `f32::MIN_POSITIVE`) is computed by
//! x86-64 CPUs in a microcode assist many times slower than a normal operation. As training
//! converges, gradients and Adam's moments drift into that range and a CPU run slows down
//! (digits: epoch time doubles after ~40 epochs). Flushing them to zero — FTZ (results) and DAZ
//! (inputs) in x86-64's MXCSR, FZ in aarch64's FPCR — keeps every step at full speed, as
//! TensorFlow does by default and `torch.set_flush_denormal(True)` does on request.
//!
//! The mode is a per-thread register. The Trainer sets it on the thread that runs the loop and
//! on every thread of that thread's rayon pool (see [`host_pool`](crate::host_pool)), where
//! burn-flex and gemm compute their parallel kernels; a thread created afterwards takes its
//! creator's mode. It stays set after the run, as torch's does.

/// Whether this architecture has a flush-to-zero mode ember can set.
pub const SUPPORTED: bool = ember_plan::accelerator::FLUSH_DENORMAL_SUPPORTED;

/// Sets (or clears) flush-to-zero and denormals-are-zero on the calling thread. Does nothing
/// where [`SUPPORTED`] is false.
pub fn set_flush_denormal(on: bool) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mode = arch::read();
        arch::write(if on {
            mode | arch::FLUSH_BITS
        } else {
            mode & !arch::FLUSH_BITS
        });
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = on;
}

/// Whether subnormals are flushed on the calling thread (every flush bit set).
pub fn flush_denormal() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        arch::read() & arch::FLUSH_BITS == arch::FLUSH_BITS
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    false
}

/// Whether the calling thread met a subnormal float since the last call: an operation took
/// a subnormal input or gave a result that underflowed (the CPU's sticky flags, which this
/// clears). Benchmarks use it to tell whether a run reaches the range flushing is about.
/// Always false where [`SUPPORTED`] is false.
pub fn take_subnormals_seen() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        arch::take_status(arch::SUBNORMAL_STATUS_BITS) != 0
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    false
}

/// Sets (or clears) flush-to-zero and denormals-are-zero, as `torch.set_flush_denormal` does,
/// on the calling thread and on every thread of the rayon pool its parallel work runs on (the
/// pool it belongs to, else the global pool, created now if it does not exist yet), where
/// burn-flex and gemm compute. The Trainer does this on CPU accelerators
/// (`--trainer.flush_denormal`); a hand-written loop compared with the Trainer sets the same
/// mode. Does nothing on an architecture without such a mode.
pub fn set_flush_denormal_everywhere(on: bool) {
    set_flush_denormal(on);
    rayon::broadcast(|_| set_flush_denormal(on));
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use std::arch::asm;

    /// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
    pub const FLUSH_BITS: u32 = (1 << 15) | (1 << 6);

    pub fn read() -> u32 {
        let mut mode: u32 = 0;
        // SAFETY: stmxcsr stores the 32-bit MXCSR to the address given, a live local.
        unsafe {
            asm!("stmxcsr [{}]", in(reg) &mut mode, options(nostack, preserves_flags));
        }
        mode
    }

    /// MXCSR's sticky denormal-operand (bit 1) and underflow (bit 4) flags.
    pub const SUBNORMAL_STATUS_BITS: u32 = (1 << 1) | (1 << 4);

    pub fn write(mode: u32) {
        // SAFETY: ldmxcsr loads MXCSR from a live local; the value is the one read with only
        // flush or status bits changed, so no reserved bit is set (which would fault).
        unsafe {
            asm!("ldmxcsr [{}]", in(reg) &mode, options(nostack, readonly, preserves_flags));
        }
    }

    /// The `bits` of the status flags that are set, clearing them (MXCSR holds both).
    pub fn take_status(bits: u32) -> u32 {
        let mode = read();
        write(mode & !bits);
        mode & bits
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use std::arch::asm;

    /// FPCR's flush-to-zero (bit 24), which on AArch64 also treats subnormal inputs as zero.
    pub const FLUSH_BITS: u64 = 1 << 24;

    pub fn read() -> u64 {
        let mode: u64;
        // SAFETY: reading FPCR has no side effect.
        unsafe {
            asm!("mrs {}, fpcr", out(reg) mode, options(nomem, nostack, preserves_flags));
        }
        mode
    }

    pub fn write(mode: u64) {
        // SAFETY: the value is FPCR as read with only FZ changed.
        unsafe {
            asm!("msr fpcr, {}", in(reg) mode, options(nomem, nostack, preserves_flags));
        }
    }

    /// FPSR's cumulative input-denormal (bit 7) and underflow (bit 3) flags.
    pub const SUBNORMAL_STATUS_BITS: u64 = (1 << 7) | (1 << 3);

    /// The `bits` of FPSR that are set, clearing them.
    pub fn take_status(bits: u64) -> u64 {
        let status: u64;
        // SAFETY: FPSR holds only sticky status flags; clearing some has no other effect.
        unsafe {
            asm!("mrs {}, fpsr", out(reg) status, options(nomem, nostack, preserves_flags));
            asm!("msr fpsr, {}", in(reg) status & !bits, options(nomem, nostack, preserves_flags));
        }
        status & bits
    }
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;
    use std::hint::black_box;

    /// 1e-20 × 1e-20 = 1e-40, below f32's smallest normal (1.18e-38).
    fn subnormal_product() -> f32 {
        black_box(1e-20f32) * black_box(1e-20f32)
    }

    #[test]
    fn flushing_zeroes_a_subnormal_product_on_this_thread_only_while_set() {
        // A test thread of its own: the mode is per thread and restored before returning.
        std::thread::spawn(|| {
            assert!(!flush_denormal());
            assert!(subnormal_product() > 0.0);
            set_flush_denormal(true);
            assert!(flush_denormal());
            assert_eq!(subnormal_product(), 0.0);
            // DAZ: a subnormal input reads as zero.
            assert_eq!(black_box(1e-40f32) * black_box(1e30f32), 0.0);
            set_flush_denormal(false);
            assert!(!flush_denormal());
            take_subnormals_seen();
            assert!(!take_subnormals_seen());
            assert!(subnormal_product() > 0.0);
            assert!(take_subnormals_seen(), "an underflow was just met");
            assert!(!take_subnormals_seen(), "and the flag cleared");
        })
        .join()
        .unwrap();
    }
}
