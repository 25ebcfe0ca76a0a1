use std::sync::{Barrier, Mutex};

use super::*;

/// Two threads standing in for two ranks: `all_gather_into` really exchanges bytes; every
/// other operation does nothing (what the check guards is the call, not the transport).
struct Threads<'a> {
    rank: usize,
    shared: &'a Shared,
}

struct Shared {
    slots: Mutex<[Vec<u8>; 2]>,
    barrier: Barrier,
}

impl Collective for Threads<'static> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        2
    }
    fn barrier(&self) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_reduce_f32(&self, _: &mut [f32], _: ReduceOp) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_reduce_f64(&self, _: &mut [f64], _: ReduceOp) -> anyhow::Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_gather(&self, _: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        unreachable!("the check gathers through all_gather_into")
    }
    fn all_gather_into(&self, bytes: &[u8], _: &[usize], out: &mut [u8]) -> anyhow::Result<()> {
        self.shared.slots.lock().unwrap()[self.rank] = bytes.to_vec();
        self.shared.barrier.wait();
        out.copy_from_slice(&self.shared.slots.lock().unwrap().concat());
        self.shared.barrier.wait();
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        panic!("abort({code})")
    }
}

/// Runs `calls` on two ranks, each through its own [`Lockstep`], at global step 12; what each
/// rank's call returned, as a message (`ok` when it passed).
fn on_two_ranks(calls: [fn(&Lockstep) -> anyhow::Result<()>; 2]) -> Vec<String> {
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        slots: Mutex::default(),
        barrier: Barrier::new(2),
    }));
    let ranks = calls.into_iter().enumerate().map(|(rank, call)| {
        std::thread::spawn(move || {
            at_step(Some(12));
            let lockstep = Lockstep::new(Rc::new(Threads { rank, shared }));
            match call(&lockstep) {
                Ok(()) => "ok".to_owned(),
                Err(e) => {
                    let agreed = e.downcast::<AgreedError>().expect("an agreed error");
                    assert_eq!((agreed.rank, agreed.code), (0, 1));
                    agreed.message
                }
            }
        })
    });
    let ranks: Vec<_> = ranks.collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

#[test]
fn the_same_call_on_every_rank_passes() {
    let results = on_two_ranks([
        |c| c.all_reduce_f32(&mut [0.0; 4], ReduceOp::Sum),
        |c| c.all_reduce_f32(&mut [1.0; 4], ReduceOp::Sum),
    ]);
    assert_eq!(results, ["ok", "ok"]);
}

#[test]
fn different_calls_stop_every_rank_with_one_message_naming_each_call_and_the_step() {
    let results = on_two_ranks([
        |c| c.all_reduce_f32(&mut [0.0; 4], ReduceOp::Sum),
        |c| c.barrier(),
    ]);
    assert_eq!(results[0], results[1], "every rank holds the same error");
    let message = &results[0];
    assert!(
        message.contains(
            "rank 0 called all_reduce_f32 (sum) of 4 values (its call #1, at global step 12)"
        ) && message.contains("rank 1 called barrier (its call #1, at global step 12)")
            && message.contains("out of step"),
        "{message}"
    );
}

#[test]
fn a_different_length_or_reduction_is_out_of_step() {
    let lengths = on_two_ranks([
        |c| c.all_reduce_f64(&mut [0.0; 3], ReduceOp::Max),
        |c| c.all_reduce_f64(&mut [0.0; 2], ReduceOp::Max),
    ]);
    assert!(
        lengths[0].contains("all_reduce_f64 (max) of 2 values"),
        "{}",
        lengths[0]
    );
    let reductions = on_two_ranks([
        |c| c.all_reduce_f64(&mut [0.0; 1], ReduceOp::Max),
        |c| c.all_reduce_f64(&mut [0.0; 1], ReduceOp::Sum),
    ]);
    assert!(
        reductions[1].contains("all_reduce_f64 (sum) of 1 values"),
        "{}",
        reductions[1]
    );
    let roots = on_two_ranks([
        |c| c.broadcast(&mut vec![1, 2], 0),
        |c| c.broadcast(&mut Vec::new(), 1),
    ]);
    assert!(roots[0].contains("broadcast from rank 1"), "{}", roots[0]);
}

#[test]
fn every_operation_survives_its_record() {
    let ops = [
        Op::Barrier,
        Op::AllReduceF32(ReduceOp::Min),
        Op::AllReduceF64(ReduceOp::Sum),
        Op::AllReduceMeanF32,
        Op::AllReduceMeanF64,
        Op::Broadcast { root: 7 },
        Op::AllGather,
        Op::ReduceScatterF32(ReduceOp::Max),
        Op::ReduceScatterF64(ReduceOp::Min),
        Op::AllGatherInto,
        Op::KeyValueStore,
        Op::Device,
    ];
    for op in ops {
        let call = Call {
            index: 41,
            op,
            len: 1 << 40,
            step: 0,
        };
        assert_eq!(Call::decode(&call.encode()), Some(call));
    }
    assert_eq!(Call::decode(&[0xff; RECORD]), None);
}
