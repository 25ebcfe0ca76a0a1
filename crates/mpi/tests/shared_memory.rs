//! Large sums and gathers between ranks of one host go through a shared memory window: every
//! rank gets the sum in rank order, bitwise, for any length (pieces of the window and their
//! shares included), in f32 and f64, all-reduced (summed or averaged) or reduce-scattered
//! into parts of any length (empty ones too), and gathers of bytes come out whole, with two
//! and three ranks; `EMBER_MPI_SHARED_MEMORY=0` turns the window off. This test starts itself
//! under `mpirun`, and each rank runs [`rank_side`].

mod common;

use std::time::Duration;

use ember_mpi::MpiCollective;
use ember_plan::collective::{Collective, ReduceOp};
use ember_plan::{Plan, Precision};

const TEST: &str = "ranks_of_one_host_sum_and_gather_through_shared_memory";
const SWITCH: &str = "EMBER_MPI_SHARED_MEMORY";

/// f32 values per megabyte piece of the window.
const PIECE: usize = (1 << 20) / 4;

#[test]
fn ranks_of_one_host_sum_and_gather_through_shared_memory() {
    if let Some((rank, ranks)) = common::rank() {
        rank_side(rank, ranks);
        return;
    }
    for (ranks, switch) in [(2, "1"), (3, "1"), (2, "0")] {
        let Some(stdout) = common::run_ranks(TEST, ranks, &[(SWITCH, switch)]) else {
            return;
        };
        for rank in 0..ranks {
            let line = format!(
                "rank {rank} of {ranks}: collectives checked (shared: {})",
                switch == "1"
            );
            assert!(stdout.contains(&line), "{line}?\n{stdout}");
        }
    }
}

/// Rank `rank`'s `i`-th value: magnitudes from 1e-3 to 1e7 and both signs, so that the order
/// of a sum shows in its rounding.
fn value(rank: usize, i: usize) -> f64 {
    let sign = if (i + rank).is_multiple_of(3) {
        -1.0
    } else {
        1.0
    };
    sign * 10f64.powi((i * 7 + rank * 5) as i32 % 11 - 3) * (1.0 + (i % 97) as f64 / 97.0)
}

/// What each rank checks.
fn rank_side(rank: usize, ranks: usize) {
    let plan = Plan {
        world_size: ranks,
        global_rank: rank,
        local_rank: rank,
        ..Plan::local("cpu", Precision::F32True)
    };
    let collective = MpiCollective::join(&plan, Duration::from_secs(60)).expect("MPI joins");
    let shared = collective.uses_shared_memory();
    assert_eq!(shared, std::env::var(SWITCH).as_deref() != Ok("0"));

    // Below the window's threshold, at it, one piece, pieces and a remainder whose shares
    // are uneven.
    for len in [10, 65_535, 65_536, PIECE, 3 * PIECE + 7] {
        let mut buf: Vec<f32> = (0..len).map(|i| value(rank, i) as f32).collect();
        collective.all_reduce_f32(&mut buf, ReduceOp::Sum).unwrap();
        let in_order = |i| (1..ranks).fold(value(0, i) as f32, |s, r| s + value(r, i) as f32);
        let wrong = (0..len).filter(|&i| buf[i].to_bits() != in_order(i).to_bits());
        // MPI_Allreduce's order among three ranks is its own; two ranks' sums have one order.
        if len * 4 >= 256 << 10 && shared || ranks == 2 {
            assert_eq!(wrong.count(), 0, "f32, {len} values, {ranks} ranks");
        } else {
            let scale = |i| (0..ranks).map(|r| value(r, i).abs()).sum::<f64>();
            let near = (0..len).all(|i| f64::from((buf[i] - in_order(i)).abs()) <= 1e-6 * scale(i));
            assert!(near, "f32, {len} values, {ranks} ranks");
        }
    }
    let len = PIECE / 2 * 3 + 1;
    let mut buf: Vec<f64> = (0..len).map(|i| value(rank, i)).collect();
    collective.all_reduce_f64(&mut buf, ReduceOp::Sum).unwrap();
    for (i, &sum) in buf.iter().enumerate() {
        let in_order = (1..ranks).fold(value(0, i), |s, r| s + value(r, i));
        assert_eq!(sum.to_bits(), in_order.to_bits(), "f64 value {i}");
    }
    // A mean is bitwise the sum divided by the ranks, whether the window divides (large
    // buffers) or MPI's sum is divided after (small ones).
    for len in [10, 2 * PIECE + 5] {
        let mine = |rank| {
            (0..len)
                .map(|i| value(rank, i) as f32)
                .collect::<Vec<f32>>()
        };
        let (mut mean, mut sum) = (mine(rank), mine(rank));
        collective.all_reduce_mean_f32(&mut mean).unwrap();
        collective.all_reduce_f32(&mut sum, ReduceOp::Sum).unwrap();
        let wrong = (0..len).filter(|&i| mean[i].to_bits() != (sum[i] / ranks as f32).to_bits());
        assert_eq!(wrong.count(), 0, "f32 mean of {len} values, {ranks} ranks");
        let mut mean: Vec<f64> = (0..len).map(|i| value(rank, i)).collect();
        collective.all_reduce_mean_f64(&mut mean).unwrap();
        let in_order = |i| (1..ranks).fold(value(0, i), |s, r| s + value(r, i));
        let wrong =
            (0..len).filter(|&i| mean[i].to_bits() != (in_order(i) / ranks as f64).to_bits());
        if len * 8 >= 256 << 10 && shared || ranks == 2 {
            assert_eq!(wrong.count(), 0, "f64 mean of {len} values, {ranks} ranks");
        }
    }
    // Reduce-scatter into parts of several pieces, of different lengths, one of them empty.
    let counts: Vec<usize> = (0..ranks)
        .map(|r| (r != 1) as usize * (PIECE + 1000 * r + 3))
        .collect();
    let start: usize = counts[..rank].iter().sum();
    let total: usize = counts.iter().sum();
    let all: Vec<f32> = (0..total).map(|i| value(rank, i) as f32).collect();
    let mut part = vec![0.0f32; counts[rank]];
    collective
        .reduce_scatter_f32(&all, &counts, &mut part, ReduceOp::Sum)
        .unwrap();
    for (j, &sum) in part.iter().enumerate() {
        let i = start + j;
        let in_order = (1..ranks).fold(value(0, i) as f32, |s, r| s + value(r, i) as f32);
        if shared || ranks == 2 {
            assert_eq!(
                sum.to_bits(),
                in_order.to_bits(),
                "reduce-scatter value {i}"
            );
        }
    }

    // Gather bytes of several pieces, of different lengths, one of them empty.
    let counts: Vec<usize> = (0..ranks)
        .map(|r| (r != 1) as usize * ((1 << 20) + 17 * r))
        .collect();
    let byte = |r: usize, i: usize| (i * 31 + r * 7) as u8;
    let mine: Vec<u8> = (0..counts[rank]).map(|i| byte(rank, i)).collect();
    let mut out = vec![0u8; counts.iter().sum()];
    collective
        .all_gather_into(&mine, &counts, &mut out)
        .unwrap();
    let whole: Vec<u8> = (0..ranks)
        .flat_map(|r| (0..counts[r]).map(move |i| byte(r, i)))
        .collect();
    assert!(out == whole, "gathered bytes");

    // A large maximum is MPI's.
    let mut buf = vec![rank as f32; PIECE];
    collective.all_reduce_f32(&mut buf, ReduceOp::Max).unwrap();
    assert!(buf.iter().all(|&x| x == (ranks - 1) as f32));
    drop(collective);
    println!("rank {rank} of {ranks}: collectives checked (shared: {shared})");
}
