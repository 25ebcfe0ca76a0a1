//! One xla device spanning the CPU plugin's 4 devices: a batch made by a loader's batcher is
//! split by rows over them, the model's tensors are whole on each, and every program is one
//! SPMD program whose partitioner adds the collectives. Its results match one device's.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Int, Tensor, TensorData};
use burn_autodiff::Autodiff;
use ember_accel_tpu_xla::backend::{making_batch, on_each_device, runtime};
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;
use common::values;

/// Whether the plugin has 4 devices (saying why not when it has not).
fn four_devices() -> bool {
    if !common::plugin_found() {
        return false;
    }
    match runtime::runtime().map(|rt| rt.device_count()) {
        Ok(n) if n >= 4 => return true,
        Ok(n) => eprintln!("skip: the plugin has {n} device(s), not 4"),
        Err(e) => eprintln!("skip: {e}"),
    }
    false
}

/// A two-layer classifier's loss on a batch of `rows` rows, and its gradients, on `device`:
/// the batch made as a loader makes one, the weights as a model holds them.
fn step(rows: usize, device: &XlaDevice) -> Vec<TensorData> {
    type B = Autodiff<Xla>;
    let (x, classes) = making_batch(device, rows, || {
        let x = Tensor::<B, 2>::from_data(TensorData::new(values(rows * 6, 1), [rows, 6]), device);
        let classes: Vec<i32> = (0..rows as i32).map(|i| i % 3).collect();
        let classes = Tensor::<B, 1, Int>::from_data(TensorData::new(classes, [rows]), device);
        (x, classes)
    });
    let w1 = Tensor::<B, 2>::from_data(TensorData::new(values(96, 2), [6, 16]), device);
    let w2 = Tensor::<B, 2>::from_data(TensorData::new(values(48, 3), [16, 3]), device);
    let (w1, w2) = (w1.require_grad(), w2.require_grad());
    let hidden = burn::tensor::activation::relu(x.matmul(w1.clone()));
    let logits = hidden.matmul(w2.clone());
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(logits, classes);
    let grads = loss.backward();
    vec![
        loss.into_data(),
        w1.grad(&grads).unwrap().into_data(),
        w2.grad(&grads).unwrap().into_data(),
    ]
}

fn assert_close(one: &[TensorData], four: &[TensorData]) {
    for (i, (a, b)) in one.iter().zip(four).enumerate() {
        assert_eq!(a.shape, b.shape, "result {i}: shape");
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                "result {i}: {x} vs {y}"
            );
        }
    }
}

/// Whether `hlo` (a serialized HloModuleProto) mentions `what`.
fn mentions(hlo: &[u8], what: &str) -> bool {
    hlo.windows(what.len()).any(|w| w == what.as_bytes())
}

#[test]
fn a_step_on_four_devices_as_one_splits_the_batch_and_matches_one_device() {
    if !four_devices() {
        return;
    }
    let one = step(32, &XlaDevice::new(0));
    let four = step(32, &XlaDevice::spanning(0, 4));
    assert_close(&one, &four);
    // The step's programs on four devices split the batch's rows, and XLA joined the
    // devices' parts of the loss and gradients with all-reduces.
    let rt = runtime::runtime().unwrap();
    let partitioned: Vec<_> = (rt.programs().into_iter())
        .filter(|(text, _)| text.contains("mhlo.num_partitions = 4"))
        .collect();
    assert!(
        partitioned
            .iter()
            .any(|(text, _)| text.contains("devices=[4,1]0,1,2,3")),
        "no program split a batch tensor"
    );
    assert!(
        (partitioned.iter())
            .any(|(_, exe)| mentions(&exe.optimized_program().unwrap(), "all-reduce")),
        "no all-reduce in the partitioned programs"
    );
}

#[test]
fn rows_that_do_not_divide_among_the_devices_still_give_one_devices_results() {
    if !four_devices() {
        return;
    }
    assert_close(
        &step(10, &XlaDevice::new(0)),
        &step(10, &XlaDevice::spanning(0, 4)),
    );
}

#[test]
fn a_batch_tensor_reads_back_whole_and_combines_with_tensors_whole_on_each_device() {
    if !four_devices() {
        return;
    }
    let device = XlaDevice::spanning(0, 4);
    let data = TensorData::new(values(12, 4), [4, 3]);
    let batch = making_batch(&device, 4, || {
        Tensor::<Xla, 2>::from_data(data.clone(), &device)
    });
    assert_eq!(batch.clone().into_data(), data);
    // Each device was given only its row of the batch.
    let rows: Vec<Vec<f32>> = (on_each_device(batch.clone()).unwrap().iter())
        .map(|d| d.to_vec().unwrap())
        .collect();
    let whole = data.to_vec::<f32>().unwrap();
    assert_eq!(
        rows,
        whole.chunks(3).map(<[f32]>::to_vec).collect::<Vec<_>>()
    );
    let weights = Tensor::<Xla, 2>::from_data(data.clone(), &device);
    let product = batch.matmul(weights.transpose());
    let expected = Tensor::<Xla, 2>::from_data(data.clone(), &XlaDevice::new(0));
    let expected = expected.clone().matmul(expected.transpose());
    assert_close(&[expected.into_data()], &[product.into_data()]);
}

#[test]
fn adam_steps_on_four_devices_leave_every_devices_weights_bitwise_equal() {
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};

    if !four_devices() {
        return;
    }
    type B = Autodiff<Xla>;
    let device = XlaDevice::spanning(0, 4);
    let mut layer: Linear<B> = LinearConfig::new(6, 3).init(&device);
    let mut adam = AdamConfig::new().init();
    for step in 0..5u64 {
        let (x, y) = making_batch(&device, 20, || {
            let x = TensorData::new(values(120, 10 + step), [20, 6]);
            let y = TensorData::new(values(60, 20 + step), [20, 3]);
            (
                Tensor::<B, 2>::from_data(x, &device),
                Tensor::<B, 2>::from_data(y, &device),
            )
        });
        let loss = (layer.forward(x) - y).powf_scalar(2.0).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &layer);
        layer = adam.step(1e-2, layer, grads);
    }
    let weight = layer.weight.val().inner();
    let copies = on_each_device(weight).unwrap();
    assert_eq!(copies.len(), 4);
    for copy in &copies[1..] {
        assert_eq!(
            copy.as_bytes(),
            copies[0].as_bytes(),
            "a device's weights drifted"
        );
    }
}
