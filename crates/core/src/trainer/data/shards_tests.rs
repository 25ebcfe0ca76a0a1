//! Shards read as a stream: token windows, the epoch order, ranks' runs, the shuffle buffer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use burn::data::dataloader::batcher::Batcher;

use super::*;
use crate::plugins::shard::Shard;

type B = burn_flex::Flex;

/// A batcher whose batch is its items.
struct Items;

impl<I> Batcher<B, I, Vec<I>> for Items {
    fn batch(&self, items: Vec<I>, _: &burn_flex::FlexDevice) -> Vec<I> {
        items
    }
}

/// Writes `tokens` as little-endian `u16`s to `dir/name`.
fn write_tokens(dir: &Path, name: &str, tokens: impl IntoIterator<Item = u16>) -> PathBuf {
    let path = dir.join(name);
    let bytes: Vec<u8> = tokens.into_iter().flat_map(u16::to_le_bytes).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `shards` files of `records` one-token windows each, whose token is the record's corpus
/// index: a loader over them yields each record's index as its only token.
fn numbered(dir: &Path, shards: usize, records: usize) -> Shards<TokenWindows> {
    for s in 0..shards {
        let first = (s * records) as u16;
        write_tokens(
            dir,
            &format!("shard-{s:03}.bin"),
            first..first + records as u16,
        );
    }
    Shards::in_dir(dir, ".bin", TokenWindows::u16(1)).unwrap()
}

/// Every item of a pass from batch `from` on, in order.
fn items<I: Send + 'static>(loader: &Loader<I>, epoch: u64, from: usize) -> Vec<I> {
    let mut pass = loader.pass(7, epoch, from..usize::MAX).unwrap();
    let mut out = Vec::new();
    while let Some((_, batch)) = pass.next_batch(&Items, &Default::default()).unwrap() {
        out.extend(batch);
    }
    out
}

/// Every record of a pass, in order, as the corpus index it holds.
fn records(loader: &Loader<Vec<u32>>, epoch: u64, from: usize) -> Vec<usize> {
    let windows = items(loader, epoch, from);
    windows.iter().map(|window| window[0] as usize).collect()
}

#[test]
fn token_windows_start_every_stride_tokens_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path(), "a.bin", 0..100);
    write_tokens(dir.path(), "b.bin", 1000..1030);
    let shards = Shards::in_dir(dir.path(), ".bin", TokenWindows::u16(10).stride(9)).unwrap();
    // a: (100 - 10) / 9 + 1 = 11 windows; b: (30 - 10) / 9 + 1 = 3.
    assert_eq!(shards.len(), 14);
    let window = |index| {
        shards
            .get(ItemKey {
                seed: 0,
                epoch: 0,
                index,
            })
            .unwrap()
    };
    assert_eq!(window(2), (18..28).collect::<Vec<u32>>());
    assert_eq!(window(11), (1000..1010).collect::<Vec<u32>>());
    assert_eq!(window(13), (1018..1028).collect::<Vec<u32>>());
    assert!(
        shards
            .get(ItemKey {
                seed: 0,
                epoch: 0,
                index: 14
            })
            .is_err()
    );
}

#[test]
fn a_truncated_or_missing_shard_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_tokens(dir.path(), "a.bin", 0..8);
    let torn = dir.path().join("b.bin");
    std::fs::write(&torn, [1, 2, 3]).unwrap();
    let err = format!(
        "{:#}",
        Shards::open([&good, &torn], TokenWindows::u16(4))
            .err()
            .unwrap()
    );
    assert!(err.contains("b.bin") && err.contains("truncated"), "{err}");
    let gone = dir.path().join("gone.bin");
    let err = format!(
        "{:#}",
        Shards::open([&good, &gone], TokenWindows::u16(4))
            .err()
            .unwrap()
    );
    assert!(err.contains("gone.bin"), "{err}");
    let err = format!(
        "{:#}",
        Shards::in_dir(dir.path(), ".tok", TokenWindows::u16(4))
            .err()
            .unwrap()
    );
    assert!(err.contains("*.tok"), "{err}");

    // A shard cut short after it was counted: the read names the file.
    let shards = Shards::open([&good], TokenWindows::u16(4)).unwrap();
    std::fs::write(&good, [0; 10]).unwrap();
    let err = format!(
        "{:#}",
        shards
            .get(ItemKey {
                seed: 0,
                epoch: 0,
                index: 1
            })
            .err()
            .unwrap()
    );
    assert!(err.contains("a.bin") && err.contains("record 1"), "{err}");
}

#[test]
fn an_unshuffled_stream_reads_the_corpus_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::from_shards(numbered(dir.path(), 3, 10), 4);
    assert_eq!(loader.num_batches(), 8);
    assert_eq!(records(&loader, 0, 0), (0..30).collect::<Vec<_>>());
}

#[test]
fn a_shuffled_stream_visits_every_record_once_in_an_order_of_the_seed_and_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::from_shards(numbered(dir.path(), 5, 20), 8)
        .shuffled()
        .shuffle_buffer(16);
    let first = records(&loader, 0, 0);
    let mut sorted = first.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    assert_ne!(first, (0..100).collect::<Vec<_>>());
    assert_eq!(records(&loader, 0, 0), first);
    assert_ne!(records(&loader, 1, 0), first);
}

#[test]
fn the_shuffle_buffer_bounds_how_far_ahead_a_record_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    // One shard: records are read in index order, so record r is read at position r.
    let loader = Loader::from_shards(numbered(dir.path(), 1, 200), 10)
        .shuffled()
        .shuffle_buffer(8);
    let order = records(&loader, 3, 0);
    for (position, &record) in order.iter().enumerate() {
        assert!(record < position + 8, "record {record} taken at {position}");
    }
    assert_ne!(order, (0..200).collect::<Vec<_>>());
}

#[test]
fn each_rank_reads_an_equal_run_of_its_own_shards() {
    let dir = tempfile::tempdir().unwrap();
    let whole = Loader::from_shards(numbered(dir.path(), 4, 25), 5).shuffled();
    let shard_of = |record: usize| record / 25;
    let mut seen = BTreeSet::new();
    for rank in 0..2 {
        let mine = records(&whole.clone().sharded(Shard { rank, world: 2 }), 2, 0);
        assert_eq!(mine.len(), 50, "rank {rank}");
        let shards: BTreeSet<usize> = mine.iter().map(|&r| shard_of(r)).collect();
        assert_eq!(shards.len(), 2, "rank {rank} read shards {shards:?}");
        for record in mine {
            assert!(seen.insert(record), "record {record} read by two ranks");
        }
    }
    // 3 ranks: 33 records each, the epoch's last one left out, so every rank takes as many
    // steps.
    let three = whole.clone().sharded(Shard { rank: 2, world: 3 });
    assert_eq!((three.num_batches(), records(&three, 2, 0).len()), (7, 33));
}

#[test]
fn a_pass_resumed_at_a_batch_continues_the_same_order_with_any_number_of_workers() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::from_shards(numbered(dir.path(), 6, 17), 4)
        .shuffled()
        .shuffle_buffer(10);
    let whole = records(&loader, 1, 0);
    assert_eq!(records(&loader, 1, 5), whole[20..]);
    for workers in [1, 2, 4] {
        let with_workers = loader.clone().num_workers(workers);
        assert_eq!(records(&with_workers, 1, 0), whole, "{workers} workers");
        assert_eq!(
            records(&with_workers, 1, 7),
            whole[28..],
            "{workers} workers"
        );
    }
}

#[test]
fn a_mapped_loader_over_shards_keeps_the_stream_order() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::from_shards(numbered(dir.path(), 3, 9), 2).shuffled();
    let mapped = loader
        .clone()
        .map(|window, key| Ok(vec![window[0], key.index as u32]));
    let out = items(&mapped, 0, 0);
    assert!(out.iter().all(|pair| pair[0] == pair[1]));
    let firsts: Vec<usize> = out.iter().map(|pair| pair[0] as usize).collect();
    assert_eq!(firsts, records(&loader, 0, 0));
}

#[test]
fn a_shuffle_buffer_on_a_loader_without_shards_is_refused_by_name() {
    let plain = Loader::in_memory(0..10usize, 2)
        .shuffled()
        .shuffle_buffer(4);
    let err = format!("{:#}", plain.checked("train").err().unwrap());
    assert!(
        err.contains("train loader") && err.contains("reads no shards"),
        "{err}"
    );
}
