//! Weight averaging, as Lightning's tests/tests_pytorch/callbacks/test_weight_averaging.py and
//! test_stochastic_weight_avg.py check it: EMAWeightAveraging keeps the moving average of the
//! weights after each step, validates and saves with it and ends `fit` with it
//! (`test_ema`, `test_ema_resume`); StochasticWeightAveraging averages the weights of the last
//! epochs at an annealed rate, ends with the average and recomputes the batch-norm statistics
//! (`test_swa_callback`, `test_swa_resume_training_from_checkpoint`); both resume bitwise.

use std::cell::RefCell;
use std::rc::Rc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::AutodiffModule;
use burn::tensor::TensorData;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{
    AnnealingStrategy, Callback, CallbackContext, EMAWeightAveraging, EmaConfig,
    StochasticWeightAveraging, SwaConfig, SwaEpochStart,
};
use ember::checkpoint::Checkpoint;
use ember::{DataLoaders, FitOutcome, Loader, Trainer, TrainerOptions};
use ember_acceptance::regression::{Batch, Item, ItemBatcher, items, serial};
use ember_acceptance::resume::{Losses, RecordLosses, float_bytes};
use ember_acceptance::tuned::{LR, Tuned, data, options};

type B = Autodiff<Flex>;

/// Every float tensor of a model (weights and running statistics) as f64, in visit order.
type Floats = Vec<Vec<f64>>;

fn floats_of(data: impl IntoIterator<Item = TensorData>) -> Floats {
    data.into_iter()
        .map(|d| d.iter::<f64>().collect())
        .collect()
}

fn model_floats(model: &Tuned<B>) -> Floats {
    let bytes = float_bytes(model);
    let to_f32 = |b: &Vec<u8>| {
        b.chunks(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect()
    };
    bytes.iter().map(to_f32).collect()
}

fn assert_close(got: &Floats, expected: &Floats, what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: tensor count");
    for (g, e) in got.iter().zip(expected) {
        for (a, b) in g.iter().zip(e) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{what}: {g:?} vs {e:?}"
            );
        }
    }
}

/// When a [`Record`] reads the weights.
#[derive(Clone, Copy, PartialEq)]
enum At {
    BatchEnd,
    EpochStart,
}

/// Records the model's weights (and the rate) at a hook.
#[derive(Clone)]
struct Record {
    at: At,
    weights: Rc<RefCell<Vec<Floats>>>,
    rates: Rc<RefCell<Vec<(u64, f64)>>>,
}

impl Record {
    fn new(at: At) -> Self {
        Self {
            at,
            weights: Default::default(),
            rates: Default::default(),
        }
    }

    fn read(&self, ctx: &mut CallbackContext<'_>) {
        let host = ctx.with_weights(|w| w.to_host()).expect("during fit");
        self.weights
            .borrow_mut()
            .push(floats_of(host.into_iter().map(|(_, d)| d)));
    }
}

impl Callback for Record {
    fn name(&self) -> &str {
        "Record"
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let s = &ctx.state;
        self.rates.borrow_mut().push((s.epoch, s.learning_rate));
        if self.at == At::BatchEnd {
            self.read(ctx);
        }
        Ok(())
    }

    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.at == At::EpochStart {
            self.read(ctx);
        }
        Ok(())
    }
}

fn ema(decay: f64) -> EMAWeightAveraging {
    EMAWeightAveraging::new(EmaConfig {
        decay,
        ..Default::default()
    })
    .unwrap()
}

/// SWA from the 3rd epoch (0-based 2) of 5, annealing linearly to 0.01 over 2 epochs.
fn swa() -> StochasticWeightAveraging {
    StochasticWeightAveraging::new(SwaConfig {
        swa_lrs: Some(0.01),
        swa_epoch_start: SwaEpochStart::Epoch(3),
        annealing_epochs: 2,
        annealing_strategy: AnnealingStrategy::Linear,
    })
    .unwrap()
}

/// Builds a Trainer (seeding the backend), then the model, and fits it on `data`.
fn fit(
    options: TrainerOptions,
    callbacks: Vec<Box<dyn Callback>>,
    data: &mut DataLoaders<Item, ItemBatcher>,
) -> anyhow::Result<(Trainer<B>, FitOutcome<Tuned<B>>)> {
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?.with_callbacks(callbacks);
    let model = Tuned::<B>::new(trainer.device());
    let out = trainer.fit(model, data)?;
    Ok((trainer, out))
}

#[test]
fn ema_ends_fit_with_the_moving_average_of_the_weights_after_each_step() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let record = Record::new(At::BatchEnd);
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(record.clone()), Box::new(ema(0.5))];
    let (_, out) = fit(options(dir.path(), 2), callbacks, &mut data(4)).unwrap();
    let seen = record.weights.borrow();
    assert_eq!(seen.len(), 8, "2 epochs of 4 steps");
    // torch's AveragedModel: the first update copies, then average * decay + current * (1 - decay).
    let mut average = seen[0].clone();
    for current in &seen[1..] {
        for (a, c) in average.iter_mut().zip(current) {
            a.iter_mut()
                .zip(c)
                .for_each(|(a, c)| *a = *a * 0.5 + c * 0.5);
        }
    }
    assert_close(&model_floats(&out.model), &average, "the model after fit");
    let last = seen.last().unwrap();
    let differs = (last.iter().flatten())
        .zip(average.iter().flatten())
        .any(|(a, b)| a != b);
    assert!(differs, "the average is not the last weights");
}

#[test]
fn ema_validates_and_saves_with_the_average_and_keeps_the_weights_beside_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        enable_checkpointing: true,
        ..options(dir.path(), 2)
    };
    let val = Loader::new(InMemDataset::new(items(8, 100)), 4);
    let mut data = data(4).val(val);
    let record = Record::new(At::BatchEnd);
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(ema(0.5)), Box::new(record.clone())];
    let (mut trainer, out) = fit(o, callbacks, &mut data).unwrap();
    // The last validation ran on the average, which the model holds after fit.
    let again = trainer.validate(out.model.valid(), &mut data).unwrap();
    assert_eq!(out.metrics["val_loss"], again["val_loss"]);
    // The checkpoint's weights are the average; the weights training continues from are the
    // callback's tensors, under the same names.
    let path = out.best_model_path.expect("a checkpoint");
    let checkpoint = Checkpoint::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    let saved: Floats = floats_of(checkpoint.weights.values().cloned());
    let mut averaged = model_floats(&out.model);
    let mut current = record.weights.borrow().last().unwrap().clone();
    // The checkpoint lists tensors by name; the model visits backbone.linear, backbone.norm,
    // head: sort both the same way.
    let names: Vec<&String> = checkpoint.weights.keys().collect();
    let own = &checkpoint.callback_tensors["EMAWeightAveraging"];
    assert_eq!(own.keys().collect::<Vec<_>>(), names);
    let order = visit_order(&names);
    averaged = order.iter().map(|&i| averaged[i].clone()).collect();
    current = order.iter().map(|&i| current[i].clone()).collect();
    assert_eq!(saved, averaged, "the checkpoint's weights are the average");
    assert_eq!(floats_of(own.values().cloned()), current);
}

/// For each checkpoint name (sorted), its index in the model's visit order.
fn visit_order(names: &[&String]) -> Vec<usize> {
    let visit = [
        "backbone.linear.weight",
        "backbone.linear.bias",
        "backbone.norm.gamma",
        "backbone.norm.beta",
        "backbone.norm.running_mean",
        "backbone.norm.running_var",
        "head.weight",
        "head.bias",
    ];
    let index = |n: &String| visit.iter().position(|v| v == n).expect(n);
    names.iter().map(|n| index(n)).collect()
}

/// Runs a 5-epoch fit with `averaging`, whole or stopped at a step and resumed; returns the
/// final float tensors and the losses.
fn resumed_run(
    dir: &std::path::Path,
    averaging: &dyn Fn() -> Box<dyn Callback>,
    stop_at: Option<u64>,
    resume: bool,
) -> (Vec<Vec<u8>>, Vec<(u64, u64)>) {
    let seen = Losses::default();
    let path = dir.join("stop.ckpt");
    let o = TrainerOptions {
        ckpt_path: resume.then(|| path.clone()),
        ..options(dir, 5)
    };
    let record = RecordLosses {
        seen: seen.clone(),
        stop_at: stop_at.map(|s| (s, path)),
    };
    let val = Loader::new(InMemDataset::new(items(8, 100)), 4);
    let callbacks = vec![averaging(), Box::new(record) as Box<dyn Callback>];
    let (_, out) = fit(o, callbacks, &mut data(4).val(val)).unwrap();
    (float_bytes(&out.model), seen.borrow().clone())
}

#[test]
fn a_fit_with_ema_resumes_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let averaging = || Box::new(ema(0.9)) as Box<dyn Callback>;
    let (whole, whole_losses) = resumed_run(dir.path(), &averaging, None, false);
    // 4 batches per epoch: step 6 is mid-way through epoch 1.
    let (_, first) = resumed_run(dir.path(), &averaging, Some(6), false);
    let (resumed, rest) = resumed_run(dir.path(), &averaging, None, true);
    assert_eq!(resumed, whole, "the averaged weights bitwise equal");
    assert_eq!(
        [first, rest].concat(),
        whole_losses,
        "every loss bitwise equal"
    );
}

#[test]
fn swa_averages_the_last_epochs_at_an_annealed_rate_and_recomputes_batch_norm() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let record = Record::new(At::EpochStart);
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(record.clone()), Box::new(swa())];
    let (_, out) = fit(options(dir.path(), 5), callbacks, &mut data(4)).unwrap();
    // The rate: the scheduler's before epoch 2, then SWALR's linear way to 0.01 over 2 epochs.
    let rates: Vec<f64> = (0..5)
        .map(|e| {
            let rates = record.rates.borrow();
            let in_epoch: Vec<f64> = rates.iter().filter(|r| r.0 == e).map(|r| r.1).collect();
            assert!(
                in_epoch.windows(2).all(|w| w[0] == w[1]),
                "one rate per epoch"
            );
            in_epoch[0]
        })
        .collect();
    let expected = [LR, LR, LR, 0.01 * 0.5 + LR * 0.5, 0.01];
    for (got, want) in rates.iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{rates:?} vs {expected:?}");
    }
    // The weights: the mean of those at the starts of epochs 2, 3 and 4 (Lightning averages at
    // each epoch's start), except the running statistics, recomputed for them.
    let seen = record.weights.borrow();
    let mean: Floats = (0..seen[0].len())
        .map(|t| {
            let n = seen[0][t].len();
            (0..n)
                .map(|i| (2..5).map(|e| seen[e][t][i]).sum::<f64>() / 3.0)
                .collect()
        })
        .collect();
    let got = model_floats(&out.model);
    let (stats, params): (Vec<usize>, Vec<usize>) = (0..got.len()).partition(|&i| i == 4 || i == 5);
    let pick =
        |f: &Floats, idx: &[usize]| -> Floats { idx.iter().map(|&i| f[i].clone()).collect() };
    assert_close(
        &pick(&got, &params),
        &pick(&mean, &params),
        "the averaged parameters",
    );
    // burn's batch norm in training mode: the batch's mean and (biased) variance of the
    // linear layer's output; the recomputed statistics are their mean over the 4 batches.
    let model = out.model.valid();
    let (mut means, mut vars) = (vec![0.0; 4], vec![0.0; 4]);
    for b in 0..4 {
        let batch: Batch<Flex> =
            ItemBatcher.batch(items(16, 0)[b * 4..b * 4 + 4].to_vec(), &FlexDevice);
        let h: Vec<f64> = model
            .backbone
            .linear
            .forward(batch.x)
            .into_data()
            .iter::<f64>()
            .collect();
        for c in 0..4 {
            let column: Vec<f64> = (0..4).map(|r| h[r * 4 + c]).collect();
            let mean = column.iter().sum::<f64>() / 4.0;
            let var = column.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 4.0;
            means[c] += mean / 4.0;
            vars[c] += var / 4.0;
        }
    }
    assert_close(
        &pick(&got, &stats),
        &vec![means, vars],
        "the recomputed statistics",
    );
}

#[test]
fn a_fit_with_swa_resumes_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let averaging = || Box::new(swa()) as Box<dyn Callback>;
    let (whole, whole_losses) = resumed_run(dir.path(), &averaging, None, false);
    // Step 14 is mid-way through epoch 3, after averaging started.
    let (_, first) = resumed_run(dir.path(), &averaging, Some(14), false);
    let checkpoint = Checkpoint::decode(
        &std::fs::read(dir.path().join("stop.ckpt")).unwrap(),
        std::path::Path::new("stop.ckpt"),
    )
    .unwrap();
    let own = &checkpoint.callback_tensors["StochasticWeightAveraging"];
    assert_eq!(
        own.len(),
        checkpoint.weights.len(),
        "the average beside the weights"
    );
    let (resumed, rest) = resumed_run(dir.path(), &averaging, None, true);
    assert_eq!(resumed, whole, "the averaged weights bitwise equal");
    assert_eq!(
        [first, rest].concat(),
        whole_losses,
        "every loss bitwise equal"
    );
}

#[test]
fn swa_needs_a_number_of_epochs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        max_epochs: None,
        max_steps: Some(8),
        ..options(dir.path(), 1)
    };
    let e = fit(o, vec![Box::new(swa())], &mut data(4)).err().unwrap();
    let flag = e.downcast_ref::<ember::FlagError>().expect("a flag error");
    assert_eq!(flag.flag, "--trainer.max_epochs");
}

#[test]
fn the_docs_snippet_on_weight_averaging_is_taken_from_this_file() {
    ember_acceptance::docs::assert_snippets_in(
        include_str!("../../docs/trainer.md"),
        "### Weight averaging",
        include_str!("weight_averaging.rs"),
        1,
    );
}
