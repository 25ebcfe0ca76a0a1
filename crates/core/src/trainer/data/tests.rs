//! Loaders: the order of an epoch, shards, and passes made by workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::tensor::Tensor;
use rand::RngExt;

use super::*;
use crate::plugins::shard::Shard;

type B = burn_flex::Flex;

fn loader(n: usize, batch: usize) -> Loader<usize> {
    Loader::new(InMemDataset::new((0..n).collect()), batch)
}

thread_local! {
    /// What [`record_scope`] was told on this thread, in order.
    static TOLD: std::cell::RefCell<Vec<Option<usize>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A [`BatchScope`] that records what it is told.
fn record_scope(_: &burn_flex::FlexDevice, rows: Option<usize>) {
    TOLD.with(|told| told.borrow_mut().push(rows));
}

/// A batcher whose batch is its items.
struct Items;

impl<I> Batcher<B, I, Vec<I>> for Items {
    fn batch(&self, items: Vec<I>, _: &burn_flex::FlexDevice) -> Vec<I> {
        items
    }
}

/// Every batch of a pass, as `(batch index, items)`.
fn all<I: Send + 'static>(
    loader: &Loader<I>,
    epoch: u64,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<(usize, Vec<I>)>> {
    let mut pass = loader.pass(7, epoch, range)?;
    let mut out = Vec::new();
    while let Some(batch) = pass.next_batch(&Items, &Default::default())? {
        out.push(batch);
    }
    Ok(out)
}

/// Items that take a time of their own to make (so workers finish out of order) and draw a
/// random value from their key: `(index, epoch, value)`.
struct Slow(usize);

impl DataSource<(usize, u64, u32)> for Slow {
    fn len(&self) -> usize {
        self.0
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<(usize, u64, u32)> {
        std::thread::sleep(Duration::from_micros((key.index * 7919 % 13) as u64 * 100));
        Ok((key.index, key.epoch, key.rng().random()))
    }
}

#[test]
fn the_scope_is_told_each_batch_s_size_before_its_batcher_runs_and_its_end_after() {
    let l = loader(7, 4);
    let mut pass = l.pass(0, 0, 0..usize::MAX).unwrap();
    let device = Default::default();
    let scoped = |pass: &mut Batches<usize>| {
        let made = pass.next_batch_scoped::<B, Vec<usize>>(&Items, &device, record_scope);
        made.unwrap().is_some()
    };
    while scoped(&mut pass) {}
    let panicking = Shapeless(crate::Stack);
    let mut pass = l.pass(0, 0, 0..1).unwrap();
    let made = pass.next_batch_scoped::<B, Tensor<B, 2>>(&panicking, &device, record_scope);
    assert!(made.is_err());
    let told = TOLD.with(|told| told.take());
    assert_eq!(told, [Some(4), None, Some(3), None, Some(4), None]);
}

#[test]
fn workers_give_the_same_batches_in_the_same_order_for_any_count() {
    let base = Loader::from_source(Slow(90), 4).shuffled();
    let want = all(&base, 3, 0..usize::MAX).unwrap();
    assert_eq!(want.len(), 23);
    assert!(want.iter().enumerate().all(|(i, (k, _))| i == *k));
    for workers in [1, 2, 4] {
        let l = base
            .clone()
            .num_workers(workers)
            .prefetch_factor(workers % 3 + 1);
        assert_eq!(
            all(&l, 3, 0..usize::MAX).unwrap(),
            want,
            "{workers} workers"
        );
        // The pool serves later passes: another epoch, and a part of one.
        assert_eq!(
            all(&l, 4, 0..usize::MAX).unwrap(),
            all(&base, 4, 0..usize::MAX).unwrap()
        );
        assert_eq!(all(&l, 3, 5..9).unwrap(), want[5..9]);
    }
}

#[test]
fn a_pass_left_early_leaves_nothing_for_the_next() {
    let l = Loader::from_source(Slow(40), 2)
        .num_workers(3)
        .prefetch_factor(2);
    {
        let mut pass = l.pass(7, 0, 0..usize::MAX).unwrap();
        pass.next_batch(&Items, &Default::default()).unwrap();
    }
    let whole = Loader::from_source(Slow(40), 2);
    assert_eq!(
        all(&l, 0, 0..usize::MAX).unwrap(),
        all(&whole, 0, 0..usize::MAX).unwrap()
    );
}

/// Counts the items made.
struct Counted(Arc<AtomicUsize>);

impl DataSource<usize> for Counted {
    fn len(&self) -> usize {
        1000
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<usize> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(key.index)
    }
}

#[test]
fn workers_make_no_more_than_the_prefetch_ahead() {
    let made = Arc::new(AtomicUsize::new(0));
    let l = Loader::from_source(Counted(Arc::clone(&made)), 10)
        .num_workers(2)
        .prefetch_factor(3);
    let mut pass = l.pass(0, 0, 0..usize::MAX).unwrap();
    pass.next_batch(&Items, &Default::default()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // One batch taken, 2 × 3 in flight at most: 70 items of the 1000.
    assert!(made.load(Ordering::SeqCst) <= 70, "{made:?} items made");
}

/// Fails at one index, or panics there.
struct Failing {
    at: usize,
    panics: bool,
}

impl DataSource<usize> for Failing {
    fn len(&self) -> usize {
        20
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<usize> {
        match key.index == self.at {
            true if self.panics => panic!("pixel out of range"),
            true => anyhow::bail!("cannot decode img_{}.png: bad header", key.index),
            false => Ok(key.index),
        }
    }
}

#[test]
fn an_item_that_fails_or_panics_is_an_error_naming_the_loader_and_the_item() {
    for (workers, panics) in [(0, false), (2, false), (0, true), (2, true)] {
        let l = Loader::from_source(Failing { at: 13, panics }, 4)
            .num_workers(workers)
            .checked("train")
            .unwrap();
        let err = format!("{:#}", all(&l, 1, 0..usize::MAX).unwrap_err());
        let cause = match panics {
            true => "panicked: pixel out of range",
            false => "cannot decode img_13.png: bad header",
        };
        assert!(
            err.contains("the train loader could not make batch 3 of epoch 1")
                && err.contains("making item 13")
                && err.contains(cause),
            "{workers} workers: {err}"
        );
    }
}

#[test]
fn a_mapped_loader_makes_each_item_from_its_key() {
    let l = loader(6, 4)
        .map(|i, key| Ok((i, key.index, key.epoch, key.rng().random::<u64>())))
        .shuffled()
        .num_workers(2);
    let again = loader(6, 4)
        .shuffled()
        .map(|i, key| Ok((i, key.index, key.epoch, key.rng().random::<u64>())));
    let batches = all(&l, 2, 0..usize::MAX).unwrap();
    assert_eq!(batches, all(&again, 2, 0..usize::MAX).unwrap());
    for (_, items) in &batches {
        assert!(
            items
                .iter()
                .all(|&(i, index, epoch, _)| i == index && epoch == 2)
        );
    }
    let draws = |epoch| {
        all(&l, epoch, 0..usize::MAX)
            .unwrap()
            .into_iter()
            .flat_map(|(_, b)| b)
            .map(|x| x.3)
            .collect::<Vec<_>>()
    };
    assert_ne!(draws(2), draws(3), "another epoch draws other values");
}

#[test]
fn a_loader_with_workers_and_no_prefetch_is_refused() {
    let err = match loader(10, 2)
        .num_workers(2)
        .prefetch_factor(0)
        .checked("val")
    {
        Ok(_) => panic!("prefetch_factor 0 was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("val loader") && err.contains("prefetch_factor 0"),
        "{err}"
    );
}

#[test]
fn batches_cover_the_epoch_once() {
    let l = loader(10, 3).shuffled();
    let batches = l.batch_indices(7, 0);
    assert_eq!(
        batches.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 3, 3, 1]
    );
    let mut all: Vec<usize> = batches.concat();
    all.sort_unstable();
    assert_eq!(all, (0..10).collect::<Vec<_>>());
    assert_eq!(l.batch_indices(7, 0), batches);
    assert_ne!(l.batch_indices(7, 1), batches);
    assert_eq!(l.clone().drop_last().batch_indices(7, 0).len(), 3);
    assert_eq!(loader(10, 3).batch_indices(7, 5)[0], vec![0, 1, 2]);
}

#[test]
fn a_loader_of_batch_size_0_is_refused_by_name() {
    assert!(loader(10, 1).checked("train").is_ok());
    let err = match loader(10, 0).checked("val") {
        Ok(_) => panic!("a loader of batch_size 0 was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("val loader") && err.contains("batch_size 0"),
        "{err}"
    );
}

#[test]
fn shards_split_the_epoch_evenly_and_pad_with_its_first_items() {
    let whole = loader(10, 2).shuffled();
    let order = epoch_permutation(10, 3, 1);
    let shards: Vec<Vec<usize>> = (0..4)
        .map(|rank| {
            whole
                .clone()
                .sharded(Shard { rank, world: 4 })
                .batch_indices(3, 1)
                .concat()
        })
        .collect();
    assert!(shards.iter().all(|s| s.len() == 3));
    assert_eq!(shards[0], vec![order[0], order[4], order[8]]);
    assert_eq!(shards[1], vec![order[1], order[5], order[9]]);
    assert_eq!(shards[2], vec![order[2], order[6], order[0]]);
    assert_eq!(shards[3], vec![order[3], order[7], order[1]]);
    let sharded = whole.sharded(Shard { rank: 1, world: 4 });
    assert_eq!(sharded.num_batches(), 2);
    assert_eq!(sharded.clone().drop_last().num_batches(), 1);
}

#[test]
fn a_batcher_that_panics_is_an_error_naming_the_batch() {
    let l = loader(10, 4).checked("val").unwrap();
    let mut pass = l.pass(0, 0, 0..usize::MAX).unwrap();
    let device = Default::default();
    let stack = crate::Stack;
    assert!(pass.next_batch::<B, Vec<usize>>(&Items, &device).is_ok());
    let err = match pass.next_batch::<B, Tensor<B, 2>>(&Shapeless(stack), &device) {
        Ok(_) => panic!("a panicking batcher made a batch"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("the val loader's batcher panicked on batch 1 of epoch 0: no shape"),
        "{err}"
    );
}

/// A batcher that panics.
struct Shapeless(crate::Stack);

impl Batcher<B, usize, Tensor<B, 2>> for Shapeless {
    fn batch(&self, _: Vec<usize>, _: &burn_flex::FlexDevice) -> Tensor<B, 2> {
        panic!("no shape")
    }
}

#[test]
fn each_rank_s_workers_make_only_that_rank_s_share() {
    let whole = Loader::from_source(Slow(30), 4).shuffled();
    for rank in 0..3 {
        let shard = Shard { rank, world: 3 };
        let alone = all(&whole.clone().sharded(shard), 1, 0..usize::MAX).unwrap();
        let with_workers = whole.clone().sharded(shard).num_workers(2);
        assert_eq!(
            all(&with_workers, 1, 0..usize::MAX).unwrap(),
            alone,
            "rank {rank}"
        );
        let mine: Vec<usize> = whole.clone().sharded(shard).batch_indices(7, 1).concat();
        let made: Vec<usize> = alone
            .iter()
            .flat_map(|(_, items)| items.iter().map(|x| x.0))
            .collect();
        assert_eq!(made, mine, "rank {rank} made another rank's items");
    }
}

#[test]
fn a_loader_told_to_skip_leaves_failed_items_out_and_counts_them() {
    for workers in [0, 2] {
        let l = Loader::from_source(
            Failing {
                at: 13,
                panics: workers == 2,
            },
            4,
        )
        .num_workers(workers)
        .skip_failed_items();
        let mut pass = l.pass(0, 1, 0..usize::MAX).unwrap();
        let mut sizes = Vec::new();
        while let Some((_, items)) = pass.next_batch(&Items, &Default::default()).unwrap() {
            sizes.push(items.len());
            assert!(!items.contains(&13));
        }
        assert_eq!(sizes, [4, 4, 4, 3, 4], "{workers} workers");
        let (count, first) = pass.skipped();
        assert_eq!(count, 1);
        assert!(
            first.is_some_and(|f| f.starts_with("making item 13: ")),
            "{first:?}"
        );
    }
    // A batch of nothing but failures still stops the run.
    let l = Loader::from_source(
        Failing {
            at: 0,
            panics: false,
        },
        1,
    )
    .skip_failed_items();
    let err = format!("{:#}", all(&l, 0, 0..usize::MAX).unwrap_err());
    assert!(err.contains("no item of the batch could be made"), "{err}");
}
