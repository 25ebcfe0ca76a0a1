//! The C allocator's thresholds for the buffers tensor ops allocate on the host.
//!
//! A training step on a CPU backend allocates and frees hundreds of activation and gradient
//! buffers of kilobytes to megabytes. glibc's malloc serves blocks from 128 KiB up with `mmap`
//! and raises that threshold when such a block is freed, and it gives free memory at the top of
//! a heap back to the kernel past a trim threshold that moves with it. Depending on the order
//! of the frees in a run, the thresholds can settle where every step maps, faults in, zeroes
//! and unmaps its buffers again: the conv example's 345-step fit took 150 to 290 thousand page
//! faults and ran 10–20 % slower, by a different amount each run. Fixed thresholds (`mmap` only
//! from 32 MiB, trimming only past 2 GiB of free memory) keep freed buffers for the next step:
//! about 53 thousand faults, most of them start-up's, in every run. The trim threshold must be
//! above what one step frees: a small ResNet on 32×32 images at batch 128 frees ~500 MB of
//! activations and gradients at the end of every step, and with trimming past 256 MiB it
//! faulted all of it in again the next step (4.3 million faults in 32 steps, 25 % of the time).
//!
//! Set once per process when a Trainer is made, on glibc targets only, and left alone when the
//! user set malloc's thresholds (`GLIBC_TUNABLES` naming `glibc.malloc.`,
//! `MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_`). The cost is that the memory a step
//! frees (up to 2 GiB) stays mapped between steps, for the next one to reuse.

/// Blocks from this size up are mapped on their own (glibc's largest allowed threshold).
pub const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory at the top of a heap past this is returned to the kernel.
pub const TRIM_THRESHOLD: i32 = i32::MAX;

/// Fixes malloc's thresholds at [`MMAP_THRESHOLD`] and [`TRIM_THRESHOLD`] for this process
/// unless the user set them; returns whether it did. Only the first call acts.
pub fn keep_freed_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SET.get_or_init(|| {
            if user_set_thresholds(|name| std::env::var(name).ok()) {
                return false;
            }
            // SAFETY: mallopt only changes the allocator's parameters; both values are
            // within the ranges glibc accepts (it returns 0 and changes nothing otherwise).
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                    && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
            }
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Whether the environment `var` reads sets malloc's thresholds itself.
fn user_set_thresholds(var: impl Fn(&str) -> Option<String>) -> bool {
    var("GLIBC_TUNABLES").is_some_and(|t| t.contains("glibc.malloc."))
        || var("MALLOC_MMAP_THRESHOLD_").is_some()
        || var("MALLOC_TRIM_THRESHOLD_").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_the_user_set_are_left_alone() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!user_set_thresholds(env(&[])));
        assert!(!user_set_thresholds(env(&[(
            "GLIBC_TUNABLES",
            "glibc.cpu.hwcaps=-AVX512F"
        )])));
        assert!(user_set_thresholds(env(&[(
            "GLIBC_TUNABLES",
            "glibc.malloc.trim_threshold=0"
        )])));
        assert!(user_set_thresholds(env(&[(
            "MALLOC_MMAP_THRESHOLD_",
            "65536"
        )])));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_takes_the_thresholds() {
        if !user_set_thresholds(|name| std::env::var(name).ok()) {
            assert!(keep_freed_buffers());
        }
    }
}
