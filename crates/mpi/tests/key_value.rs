//! The key-value store over MPI (and the byte gathers beside it), with two ranks on this
//! machine: this test starts itself under `mpirun -np 2`, and each rank runs [`rank_side`].

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ember_mpi::MpiCollective;
use ember_plan::collective::Collective;
use ember_plan::{Plan, Precision};

const TEST: &str = "two_ranks_share_a_key_value_store";

#[test]
fn two_ranks_share_a_key_value_store() {
    if let Some((rank, _)) = common::rank() {
        rank_side(rank);
        return;
    }
    let Some(stdout) = common::run_ranks(TEST, 2, &[]) else {
        return;
    };
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("rank {rank}: store checked")),
            "{stdout}"
        );
    }
}

/// What each of the two ranks checks.
fn rank_side(rank: usize) {
    let plan = Plan {
        world_size: 2,
        global_rank: rank,
        local_rank: rank,
        ..Plan::local("cpu", Precision::F32True)
    };
    let collective = MpiCollective::join(&plan, Duration::from_secs(60)).expect("MPI joins");
    let store = collective.key_value_store().expect("a store");
    let again = collective.key_value_store().expect("the same store");
    assert!(
        Arc::ptr_eq(&store, &again),
        "a second call gives the same store"
    );
    let other = 1 - rank;
    let wait = Duration::from_secs(20);

    // A get waits for a put another rank makes later; values are bytes, zeros included.
    let value = |r: usize| vec![r as u8, 0, 255, b'k'];
    if rank == 0 {
        std::thread::sleep(Duration::from_millis(200));
    }
    store.put(&format!("from/{rank}"), &value(rank)).unwrap();
    let got = store.get(&format!("from/{other}"), wait).unwrap();
    assert_eq!(got, Some(value(other)));

    // Absent keys: try_get says so at once, get after its timeout.
    assert_eq!(store.try_get("never").unwrap(), None);
    let start = Instant::now();
    assert_eq!(
        store.get("never", Duration::from_millis(100)).unwrap(),
        None
    );
    assert!(start.elapsed() >= Duration::from_millis(100));

    // A later put replaces a value.
    if rank == 0 {
        store.put("replaced", b"first").unwrap();
        store.put("replaced", b"second").unwrap();
    }
    collective.barrier().unwrap();
    assert_eq!(store.try_get("replaced").unwrap(), Some(b"second".to_vec()));

    // Many threads of both ranks at once, each waiting for its peer on the other rank.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                store.put(&format!("t/{rank}/{t}"), &[t as u8; 3]).unwrap();
                store.get(&format!("t/{other}/{t}"), wait).unwrap()
            })
        })
        .collect();
    for (t, thread) in threads.into_iter().enumerate() {
        assert_eq!(thread.join().unwrap(), Some(vec![t as u8; 3]));
    }

    // The collective beside the store: a gather of nothing from every rank (OpenMPI refuses a
    // zero-size gather), and of parts of different lengths, one of them empty.
    assert_eq!(
        collective.all_gather(&[]).unwrap(),
        vec![Vec::<u8>::new(); 2]
    );
    let part = vec![7u8; rank * 3];
    assert_eq!(
        collective.all_gather(&part).unwrap(),
        [vec![], vec![7u8; 3]]
    );

    // Dropping the collective closes the store for whoever still holds it.
    drop(again);
    drop(collective);
    let err = store.put("late", b"x").unwrap_err().to_string();
    assert!(err.contains("closed"), "{err}");
    println!("rank {rank}: store checked");
}
