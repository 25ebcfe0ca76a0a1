//! Where the loops collect what steps logged: the Trainer decides when a value is read from
//! the device (values logged `on_step` only on logging steps or when the progress bar shows
//! them, values logged `on_epoch` in batches of `UNREAD_EPOCH_VALUES` and at the epoch's end)
//! and reduces epoch values as Lightning does: a mean weighted by the batch size, unless
//! another reduction is asked for.

use std::collections::{BTreeMap, BTreeSet};

use burn::tensor::backend::Backend;

use super::log::{Entry, Reduce, StepLog};
use crate::callbacks::LazyValue;
use crate::collective::Collective;

/// Step values of an epoch value kept on the device before they are read (the device has
/// finished all but the latest of them by then): a step need not wait for the device, and an
/// epoch of many steps does not hold a device value for each.
const UNREAD_EPOCH_VALUES: usize = 64;

/// One epoch value's reduction so far, and the step values not read yet with their weights.
#[derive(Debug, Clone)]
struct Accumulator {
    total: f64,
    weight: f64,
    reduce: Reduce,
    sync: bool,
    unread: Vec<(LazyValue, f64)>,
}

impl Accumulator {
    /// Nothing reduced yet.
    fn empty(reduce: Reduce, sync: bool) -> Self {
        let total = match reduce {
            Reduce::Max => f64::NEG_INFINITY,
            Reduce::Min => f64::INFINITY,
            _ => 0.0,
        };
        Self {
            total,
            weight: 0.0,
            reduce,
            sync,
            unread: Vec::new(),
        }
    }

    /// Takes a step's value of weight `w`, reading the unread ones once there are
    /// [`UNREAD_EPOCH_VALUES`].
    fn push(&mut self, value: LazyValue, w: f64) {
        self.unread.push((value, w));
        if self.unread.len() >= UNREAD_EPOCH_VALUES {
            self.settle();
        }
    }

    /// Reads the unread step values into the reduction.
    fn settle(&mut self) {
        for (value, w) in std::mem::take(&mut self.unread) {
            self.add(value.get(), w);
        }
    }

    fn add(&mut self, x: f64, w: f64) {
        match self.reduce {
            Reduce::Mean => {
                self.total += x * w;
                self.weight += w;
            }
            Reduce::Sum => self.total += x,
            Reduce::Max => self.total = self.total.max(x),
            Reduce::Min => self.total = self.total.min(x),
        }
    }

    /// Folds in another rank's partial reduction.
    fn merge(&mut self, total: f64, weight: f64) {
        match self.reduce {
            Reduce::Mean | Reduce::Sum => {
                self.total += total;
                self.weight += weight;
            }
            Reduce::Max => self.total = self.total.max(total),
            Reduce::Min => self.total = self.total.min(total),
        }
    }

    fn value(&self) -> f64 {
        match self.reduce {
            Reduce::Mean if self.weight > 0.0 => self.total / self.weight,
            Reduce::Mean => f64::NAN,
            _ => self.total,
        }
    }
}

/// Where a loop collects what its steps logged.
#[derive(Debug, Default)]
pub struct MetricCollector {
    epoch: BTreeMap<String, Accumulator>,
    /// Step values of the latest logging step, by final name.
    pub step: BTreeMap<String, f64>,
    /// The step values logged with `sync_dist`.
    step_sync: BTreeSet<String>,
    /// Values shown in the progress bar, by final name, read when the bar (or a callback)
    /// looks at them.
    pub prog_bar: BTreeMap<String, LazyValue>,
    /// Step values logged since each name's latest logging step, read only when
    /// [`take_pending`](Self::take_pending) asks (not every step: each read waits for the device).
    pending: BTreeMap<String, Pending>,
}

/// A step value not logged yet (read already, or how to read it), and whether it is synced
/// over the ranks.
struct Pending {
    value: LazyValue,
    sync: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("sync", &self.sync).finish()
    }
}

impl MetricCollector {
    /// Takes what a step logged. `read_step` says whether on_step values are wanted now.
    pub fn collect<B: Backend>(&mut self, log: &mut StepLog<B>, read_step: bool) {
        let (step_default, epoch_default) = log.defaults();
        for Entry {
            name,
            value,
            options,
        } in log.entries.drain(..)
        {
            let on_step = options.on_step.unwrap_or(step_default);
            let on_epoch = options.on_epoch.unwrap_or(epoch_default);
            let (mut step_name, mut epoch_name) = if on_step && on_epoch {
                (format!("{name}_step"), format!("{name}_epoch"))
            } else {
                (name.clone(), name)
            };
            if let Some(index) = log
                .loader
                .filter(|_| options.add_dataloader_idx != Some(false))
            {
                let suffix = format!("/dataloader_idx_{index}");
                step_name.push_str(&suffix);
                epoch_name.push_str(&suffix);
            }
            if !on_step && !on_epoch {
                continue;
            }
            let sync = options.sync_dist;
            let value = LazyValue::unread(move || value.read());
            if on_step && read_step {
                if sync {
                    self.step_sync.insert(step_name.clone());
                }
                self.pending.remove(&step_name);
                self.step.insert(step_name.clone(), value.get());
            } else if on_step {
                let pending = Pending {
                    value: value.clone(),
                    sync,
                };
                self.pending.insert(step_name.clone(), pending);
            }
            if on_step && options.prog_bar {
                self.prog_bar.insert(step_name, value.clone());
            }
            if on_epoch {
                self.epoch
                    .entry(epoch_name)
                    .or_insert(Accumulator::empty(options.reduce, sync))
                    .push(value, options.batch_size.unwrap_or(1) as f64);
            }
        }
    }

    /// The step values logged since their latest logging step, read now and `sync_dist` ones
    /// averaged as [`take_step`](Self::take_step) does: the current values at an epoch's end.
    pub fn take_pending(
        &mut self,
        collective: Option<&dyn Collective>,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        for (name, Pending { value, sync }) in std::mem::take(&mut self.pending) {
            if sync {
                self.step_sync.insert(name.clone());
            }
            self.step.insert(name, value.get());
        }
        self.take_step(collective)
    }

    /// The latest logging step's values, clearing them. With a collective, the values logged
    /// with `sync_dist` are averaged over the ranks that logged them.
    pub fn take_step(
        &mut self,
        collective: Option<&dyn Collective>,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut step = std::mem::take(&mut self.step);
        let synced = std::mem::take(&mut self.step_sync);
        if let Some(collective) = collective {
            let own: Vec<(&String, f64)> = synced
                .iter()
                .filter_map(|name| step.get(name).map(|x| (name, *x)))
                .collect();
            let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
            for bytes in collective.all_gather(&serde_json::to_vec(&own)?)? {
                let rank: Vec<(String, f64)> = serde_json::from_slice(&bytes)?;
                for (name, x) in rank {
                    let (sum, n) = sums.entry(name).or_default();
                    *sum += x;
                    *n += 1.0;
                }
            }
            for (name, (sum, n)) in sums {
                if let Some(x) = step.get_mut(&name) {
                    *x = sum / n;
                }
            }
        }
        Ok(step)
    }

    /// The epoch's reduced values, clearing them for the next epoch. With a collective, the
    /// values logged with `sync_dist` are reduced over every rank's partial reductions.
    pub fn take_epoch(
        &mut self,
        collective: Option<&dyn Collective>,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut epoch = std::mem::take(&mut self.epoch);
        epoch.values_mut().for_each(Accumulator::settle);
        if let Some(collective) = collective {
            let partial: Vec<(&String, f64, f64)> = epoch
                .iter()
                .filter(|(_, acc)| acc.sync)
                .map(|(name, acc)| (name, acc.total, acc.weight))
                .collect();
            let gathered = collective.all_gather(&serde_json::to_vec(&partial)?)?;
            let mut synced: BTreeMap<String, Accumulator> = BTreeMap::new();
            for bytes in gathered {
                let ranks: Vec<(String, f64, f64)> = serde_json::from_slice(&bytes)?;
                for (name, total, weight) in ranks {
                    if let Some(own) = epoch.get(&name) {
                        synced
                            .entry(name)
                            .or_insert(Accumulator::empty(own.reduce, true))
                            .merge(total, weight);
                    }
                }
            }
            epoch.extend(synced);
        }
        Ok(epoch
            .into_iter()
            .map(|(name, acc)| (name, acc.value()))
            .collect())
    }

    /// Drops everything collected (after a sanity check).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reduce(reduce: Reduce, values: &[(f64, f64)]) -> f64 {
        let mut acc = Accumulator::empty(reduce, false);
        for &(x, w) in values {
            acc.add(x, w);
        }
        acc.value()
    }

    #[test]
    fn epoch_reductions() {
        let values = [(1.0, 3.0), (0.0, 1.0), (2.0, 4.0)];
        assert_eq!(reduce(Reduce::Mean, &values), 11.0 / 8.0);
        assert_eq!(reduce(Reduce::Sum, &values), 3.0);
        assert_eq!(reduce(Reduce::Max, &values), 2.0);
        assert_eq!(reduce(Reduce::Min, &values), 0.0);
        assert!(reduce(Reduce::Mean, &[]).is_nan());
    }

    /// Rank 0 of a two-rank run whose rank 1 sent `other`'s partial reductions.
    struct TwoRanks {
        other: Vec<u8>,
    }

    impl Collective for TwoRanks {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn barrier(&self) -> anyhow::Result<()> {
            Ok(())
        }
        fn all_reduce_f32(
            &self,
            _: &mut [f32],
            _: crate::collective::ReduceOp,
        ) -> anyhow::Result<()> {
            unimplemented!("not used by metric sync")
        }
        fn all_reduce_f64(
            &self,
            _: &mut [f64],
            _: crate::collective::ReduceOp,
        ) -> anyhow::Result<()> {
            unimplemented!("not used by metric sync")
        }
        fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> anyhow::Result<()> {
            unimplemented!("not used by metric sync")
        }
        fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
            Ok(vec![bytes.to_vec(), self.other.clone()])
        }
        fn abort(&self, code: i32) -> ! {
            std::process::exit(code)
        }
    }

    #[test]
    fn sync_dist_reduces_over_every_rank_and_leaves_the_rest_alone() {
        let mut collector = MetricCollector::default();
        let mut put = |name: &str, reduce, sync, values: &[(f64, f64)]| {
            let mut acc = Accumulator::empty(reduce, sync);
            for &(x, w) in values {
                acc.add(x, w);
            }
            collector.epoch.insert(name.to_owned(), acc);
        };
        put("val_acc", Reduce::Mean, true, &[(1.0, 3.0)]);
        put("val_max", Reduce::Max, true, &[(2.0, 1.0)]);
        put("own", Reduce::Mean, false, &[(7.0, 1.0)]);
        // Rank 1: val_acc 0.5 over 2 samples, val_max 5.
        let other = serde_json::to_vec(&[("val_acc", 1.0, 2.0), ("val_max", 5.0, 0.0)]).unwrap();
        let epoch = collector.take_epoch(Some(&TwoRanks { other })).unwrap();
        assert_eq!(epoch["val_acc"], 4.0 / 5.0);
        assert_eq!(epoch["val_max"], 5.0);
        assert_eq!(epoch["own"], 7.0);
        assert!(collector.take_epoch(None).unwrap().is_empty());
    }

    /// A training step's `prog_bar` value, on a step that writes no logs, is read only when
    /// something looks at it (Lightning reads its bar's values when the bar redraws); one
    /// logged on a logging step is read there.
    #[test]
    fn a_prog_bar_value_stays_on_the_device_until_looked_at() {
        type B = burn_flex::Flex;
        let loss = |x: f32| burn::tensor::Tensor::<B, 1>::from_floats([x], &Default::default());
        let options = crate::trainer::log::LogOptions::default().prog_bar();
        let mut collector = MetricCollector::default();
        let mut log = StepLog::<B>::new(crate::stage::Stage::Fit);
        log.log_with("train_loss", loss(0.25), options);
        collector.collect(&mut log, false);
        let shown = collector.prog_bar["train_loss"].clone();
        assert_eq!(format!("{shown:?}"), "<unread>");
        assert_eq!(shown.get(), 0.25);
        assert_eq!(collector.take_pending(None).unwrap()["train_loss"], 0.25);

        log.log_with("train_loss", loss(0.5), options);
        collector.collect(&mut log, true);
        assert_eq!(format!("{:?}", collector.prog_bar["train_loss"]), "0.5");
        assert_eq!(collector.take_step(None).unwrap()["train_loss"], 0.5);
    }

    /// Epoch values stay on the device until [`UNREAD_EPOCH_VALUES`] of them wait, and the
    /// rest until the epoch's end (Lightning accumulates them on the device).
    #[test]
    fn epoch_values_are_read_in_batches_and_at_the_epochs_end() {
        type B = burn_flex::Flex;
        let loss = |x: f32| burn::tensor::Tensor::<B, 1>::from_floats([x], &Default::default());
        let options = crate::trainer::log::LogOptions::default().on_epoch(true);
        let mut collector = MetricCollector::default();
        let mut log = StepLog::<B>::new(crate::stage::Stage::Validate);
        let steps = UNREAD_EPOCH_VALUES + 3;
        for k in 0..steps {
            log.log_with("val_loss", loss(k as f32), options);
            collector.collect(&mut log, false);
        }
        let unread = &collector.epoch["val_loss"].unread;
        assert_eq!(
            unread.len(),
            3,
            "the first {UNREAD_EPOCH_VALUES} were read together"
        );
        assert_eq!(format!("{:?}", unread[0].0), "<unread>");
        let mean = (steps - 1) as f64 / 2.0;
        assert_eq!(collector.take_epoch(None).unwrap()["val_loss"], mean);
    }

    #[test]
    fn sync_dist_step_values_are_the_mean_of_the_ranks() {
        let mut collector = MetricCollector::default();
        collector.step.insert("loss".into(), 1.0);
        collector.step.insert("own".into(), 7.0);
        collector.step_sync.insert("loss".into());
        let other = serde_json::to_vec(&[("loss", 3.0)]).unwrap();
        let step = collector.take_step(Some(&TwoRanks { other })).unwrap();
        assert_eq!(step["loss"], 2.0);
        assert_eq!(step["own"], 7.0);
        assert!(collector.take_step(None).unwrap().is_empty());
    }
}
