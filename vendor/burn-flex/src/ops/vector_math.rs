//! f32 arithmetic written without calls or branches, so that the loops applying it over a
//! tensor vectorise: `exp`, and GELU with its gradient. `libm::erff` and `f32::exp` are scalar
//! calls per element; they were most of a transformer's GELU and softmax time.

/// `1/√2`.
const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
/// `1/√(2π)`, the standard normal density at 0.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// The standard normal distribution's cdf and density at `x`: `(Φ(x), φ(x))`.
///
/// `erf` is Abramowitz & Stegun's 7.1.26 (absolute error ≤ 1.5e-7, as close to `erff` as f32
/// holds near ±1); `e^{-x²/2}` is computed once and serves both.
#[inline(always)]
fn normal_cdf_pdf(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152,
        1.061_405_4,
    ];
    let gauss = exp(-0.5 * x * x);
    let z = abs(x) * FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erf = copysign(1.0 - poly * gauss, x);
    (0.5 * (1.0 + erf), gauss * FRAC_1_SQRT_2PI)
}

/// `gelu(x) = x Φ(x)`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    x * normal_cdf_pdf(x).0
}

/// `grad × gelu'(x)`, with `gelu'(x) = Φ(x) + x φ(x)`.
#[inline(always)]
pub(crate) fn gelu_backward(x: f32, grad: f32) -> f32 {
    let (cdf, pdf) = normal_cdf_pdf(x);
    grad * (cdf + x * pdf)
}

/// `e^x` within a few ulp of `f32::exp` on `[-87, 88]`, the range of normal results; 0 below
/// it, infinity above, NaN for NaN. `x = n ln2 + r` with `|r| ≤ ln2/2` (n rounded by adding 1.5·2²³,
/// which leaves it in the low mantissa bits), `e^r` by its degree-6 Taylor polynomial
/// (truncation ≤ 1.2e-7 relative), `2ⁿ` built from its exponent bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const SHIFTER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let (too_small, too_large) = (x < -87.0, x > 88.0);
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * core::f32::consts::LOG2_E + SHIFTER;
    let n = shifted - SHIFTER;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let taylor = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let n_bits = shifted.to_bits().wrapping_sub(SHIFTER.to_bits()) as i32;
    let value = taylor * f32::from_bits(((n_bits + 127) << 23) as u32);
    if too_small {
        0.0
    } else if too_large {
        f32::INFINITY
    } else {
        value
    }
}

#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// `magnitude`'s absolute value with `sign`'s sign.
#[inline(always)]
fn copysign(magnitude: f32, sign: f32) -> f32 {
    f32::from_bits((magnitude.to_bits() & 0x7fff_ffff) | (sign.to_bits() & 0x8000_0000))
}

#[cfg(test)]
mod tests {
    /// x from -10 to 10 in steps of 1/512, and a few wide values.
    fn inputs() -> impl Iterator<Item = f32> {
        (-5120..=5120)
            .map(|i| i as f32 / 512.0)
            .chain([-1e4, -100.0, -30.0, 30.0, 100.0, 1e4])
    }

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        for i in -87_000..=88_000 {
            let x = i as f32 / 1000.0;
            let (ours, libm) = (super::exp(x), libm::expf(x));
            assert!(
                ((ours - libm) / libm).abs() < 4.0 * f32::EPSILON,
                "exp({x}) = {ours}, libm {libm}"
            );
        }
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(super::exp(-100.0), 0.0);
        assert_eq!(super::exp(100.0), f32::INFINITY);
        assert_eq!(super::exp(f32::INFINITY), f32::INFINITY);
        assert!(super::exp(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_and_its_gradient_match_the_erf_formula() {
        for x in inputs() {
            let (x64, frac_1_sqrt_2pi) = (x as f64, 1.0 / (2.0 * core::f64::consts::PI).sqrt());
            let cdf = 0.5 * (1.0 + libm::erf(x64 / core::f64::consts::SQRT_2));
            let pdf = frac_1_sqrt_2pi * (-0.5 * x64 * x64).exp();
            let (gelu, grad) = (x64 * cdf, cdf + x64 * pdf);
            let close =
                |ours: f32, want: f64| (ours as f64 - want).abs() <= 5e-7 * (1.0 + want.abs());
            assert!(
                close(super::gelu(x), gelu),
                "gelu({x}) = {}, want {gelu}",
                super::gelu(x)
            );
            let ours = super::gelu_backward(x, 1.0);
            assert!(close(ours, grad), "gelu'({x}) = {ours}, want {grad}");
        }
    }
}
