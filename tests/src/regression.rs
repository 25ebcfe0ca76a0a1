//! A small linear regression whose items carry their index (so tests can see which batches
//! ran), with its data module: the Trainer's loop tests train it on the cpu backend.
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use ember::{
    DataModule, Hparams, LightningModule, Loader, LogOptions, Optimizers, Reduce, StepLog,
    TrainerOptions, TrainingModule, optim,
};

/// burn-flex's random generator is one per process: tests that seed it and then draw initial
/// weights must not interleave, so every test here holds this lock.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Inputs per item.
pub const FEATURES: usize = 4;

/// One example: inputs, target, and its index in the data set.
#[derive(Debug, Clone)]
pub struct Item {
    /// Inputs (the last is a constant 1).
    pub x: [f32; FEATURES],
    /// Target: a fixed linear function of the inputs.
    pub y: f32,
    /// Position in the data set.
    pub index: usize,
}

/// `n` items, their inputs drawn from positions `offset..offset + n`.
pub fn items(n: usize, offset: usize) -> Vec<Item> {
    (0..n)
        .map(|i| {
            let k = (i + offset) as f32;
            let x = [(k * 0.37).sin(), (k * 0.11).cos(), (k * 0.07).sin(), 1.0];
            let y = x[0] - 2.0 * x[1] + 3.0 * x[2] + 0.5;
            Item { x, y, index: i }
        })
        .collect()
}

/// A batch of items on a device.
#[derive(Debug, Clone)]
pub struct Batch<B: Backend> {
    /// Inputs, `[n, FEATURES]`.
    pub x: Tensor<B, 2>,
    /// Targets, `[n, 1]`.
    pub y: Tensor<B, 2>,
    /// The items' indices.
    pub indices: Vec<usize>,
}

/// Stacks items into a [`Batch`].
#[derive(Clone, Copy, Default)]
pub struct ItemBatcher;

impl<B: Backend> Batcher<B, Item, Batch<B>> for ItemBatcher {
    fn batch(&self, items: Vec<Item>, device: &B::Device) -> Batch<B> {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|i| i.x).collect();
        let y: Vec<f32> = items.iter().map(|i| i.y).collect();
        Batch {
            x: Tensor::from_data(TensorData::new(x, [n, FEATURES]), device),
            y: Tensor::from_data(TensorData::new(y, [n, 1]), device),
            indices: items.iter().map(|i| i.index).collect(),
        }
    }
}

/// Train (shuffled) and val loaders of the regression items.
pub struct Data {
    /// Training items.
    pub train: usize,
    /// Validation items (0: no val loader).
    pub val: usize,
    /// Items per batch.
    pub batch_size: usize,
}

/// A data module of `train` and `val` items in batches of `batch_size`.
pub fn data(train: usize, val: usize, batch_size: usize) -> Data {
    Data {
        train,
        val,
        batch_size,
    }
}

impl DataModule for Data {
    type Item = Item;
    type Batcher = ItemBatcher;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        Ok(Some(
            Loader::new(InMemDataset::new(items(self.train, 0)), self.batch_size).shuffled(),
        ))
    }
    fn val_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        Ok((self.val > 0)
            .then(|| Loader::new(InMemDataset::new(items(self.val, 10_000)), self.batch_size)))
    }
}

/// `y = w·x` trained with SGD; logs `train_loss`, the epoch's `min_index`/`max_index` and
/// `val_loss`.
#[derive(Module, Debug)]
pub struct Regression<B: Backend> {
    /// The layer.
    pub linear: Linear<B>,
    /// SGD's learning rate.
    pub lr: f64,
}

impl<B: Backend> Regression<B> {
    /// A 4-to-1 linear layer learning at 0.05.
    pub fn new(device: &B::Device) -> Self {
        Self {
            linear: LinearConfig::new(FEATURES, 1).init(device),
            lr: 0.05,
        }
    }

    /// Mean squared error on `batch`.
    pub fn loss(&self, batch: &Batch<B>) -> Tensor<B, 1> {
        let diff = self.linear.forward(batch.x.clone()) - batch.y.clone();
        diff.square().mean()
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Regression<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(
        &self,
        _: &Hparams,
    ) -> anyhow::Result<Optimizers<Self::Optimizer, f64>> {
        Ok(Optimizers::sgd(self.lr))
    }
}

impl<B: Backend> LightningModule<B> for Regression<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = self.loss(&batch);
        log.log("train_loss", &loss);
        let first = *batch.indices.iter().min().unwrap() as f64;
        let last = *batch.indices.iter().max().unwrap() as f64;
        let epoch = LogOptions::default().on_step(false).on_epoch(true);
        log.log_with("min_index", first, epoch.reduce(Reduce::Min));
        log.log_with("max_index", last, epoch.reduce(Reduce::Max));
        loss
    }

    fn validation_step(&self, batch: Batch<B>, log: &mut StepLog<B>) {
        let n = batch.indices.len();
        log.log_with(
            "val_loss",
            self.loss(&batch),
            LogOptions::default().batch_size(n),
        );
    }
}

/// Options for a quiet run of `max_epochs` epochs writing under `root`: seed 7, no progress bar
/// or model summary.
pub fn quiet_options(root: &std::path::Path, max_epochs: u64) -> TrainerOptions {
    TrainerOptions {
        seed: Some(7),
        enable_progress_bar: false,
        enable_model_summary: false,
        default_root_dir: root.to_owned(),
        max_epochs: Some(max_epochs),
        ..TrainerOptions::default()
    }
}

/// The bits of the model's weight and bias, to compare two runs bitwise.
pub fn weight_bits<B: Backend>(model: &Regression<B>) -> Vec<u32> {
    let linear = &model.linear;
    let mut w = linear.weight.val().into_data().to_vec::<f32>().unwrap();
    if let Some(bias) = &linear.bias {
        w.extend(bias.val().into_data().to_vec::<f32>().unwrap());
    }
    w.into_iter().map(f32::to_bits).collect()
}
