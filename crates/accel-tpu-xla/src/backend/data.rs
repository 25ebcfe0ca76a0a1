//! Host data in and out of PJRT buffers, and random tensors made on the host.

use burn_backend::{DType, Distribution, TensorData};
use burn_std::rand::{StdRng, get_seeded_rng};
use burn_std::{bf16, f16};
use std::sync::Mutex;

use crate::pjrt::ElementType;

/// The PJRT element type holding `dtype`, or why there is none.
pub fn element_type(dtype: DType) -> Result<ElementType, String> {
    Ok(match dtype {
        DType::F32 | DType::Flex32 => ElementType::F32,
        DType::BF16 => ElementType::Bf16,
        DType::F16 => ElementType::F16,
        DType::F64 => ElementType::F64,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::Bool(burn_backend::BoolStore::Native | burn_backend::BoolStore::U8) => {
            ElementType::Pred
        }
        other => return Err(format!("the xla accelerator has no buffers of {other:?}")),
    })
}

/// PJRT dims for a burn shape.
pub fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// The random stream of every xla device in the process, seeded by `Backend::seed` (as
/// burn-flex's is, so both make the same parameters from the same seed).
static RNG: Mutex<Option<StdRng>> = Mutex::new(None);

/// Seeds the random stream.
pub fn seed(seed: u64) {
    use burn_std::rand::SeedableRng;
    *RNG.lock().expect("rng lock") = Some(StdRng::seed_from_u64(seed));
}

/// A random tensor of `dtype` drawn on the host from the process's stream.
pub fn random(shape: &[usize], distribution: Distribution, dtype: DType) -> TensorData {
    let mut guard = RNG.lock().expect("rng lock");
    let mut rng = guard.take().unwrap_or_else(get_seeded_rng);
    let shape = shape.to_vec();
    let data = match dtype {
        DType::F64 => TensorData::random::<f64, _, _>(shape, distribution, &mut rng),
        DType::F16 => TensorData::random::<f16, _, _>(shape, distribution, &mut rng),
        DType::BF16 => TensorData::random::<bf16, _, _>(shape, distribution, &mut rng),
        DType::I64 => TensorData::random::<i64, _, _>(shape, distribution, &mut rng),
        DType::I32 => TensorData::random::<i32, _, _>(shape, distribution, &mut rng),
        _ => match distribution {
            Distribution::Bernoulli(p) if (0.0..1.0).contains(&p) => {
                TensorData::new(bernoulli_f32(shape.iter().product(), p, &mut rng), shape)
            }
            _ => TensorData::random::<f32, _, _>(shape, distribution, &mut rng),
        },
    };
    *guard = Some(rng);
    data
}

/// `count` draws of 1.0 with probability `p` (in `[0, 1)`), else 0.0: dropout's mask, one
/// 32-bit word of the stream per element below `p·2³²`, as ember-burn-flex draws it, so that
/// the cpu and xla accelerators make the same masks from the same seed.
fn bernoulli_f32(count: usize, p: f64, rng: &mut StdRng) -> Vec<f32> {
    use burn_std::rand::RngExt;
    let threshold = (p * 2f64.powi(32)).ceil() as u64;
    (0..count)
        .map(|_| f32::from(u8::from(u64::from(rng.random::<u32>()) < threshold)))
        .collect()
}
