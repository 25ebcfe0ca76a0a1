//! What the benches share: the rounds to run and the median of a round's figures.

/// The first argument that is a number (`cargo xtask bench NAME ROUNDS`), else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}

/// The median of `v`: of an even count, the mean of the two middle values (so that two rounds
/// give their mean, not the better one).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let middle = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[middle - 1] + v[middle]) / 2.0
    } else {
        v[middle]
    }
}
