//! What the xla backend's test files share.

use ember_accel_tpu_xla::pjrt::plugin;

/// Whether a PJRT plugin is there to test with; says why the test is skipped when not.
pub fn plugin_found() -> bool {
    match plugin::find() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skip: {e}");
            false
        }
    }
}

/// `n` values spread over [-2, 2), the same for every `seed` (xorshift): deterministic host data
/// to feed both backends or both device layouts alike.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}
