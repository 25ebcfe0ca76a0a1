//! Each convolution of the conv example's ResNet timed alone, on ember's `cpu` kernels
//! (burn-flex) and on PyTorch: `cargo xtask bench convs [ROUNDS]` (the torch venv:
//! scripts/setup.sh --torch).
//!
//! A layer's forward pass and its backward pass (the weight's gradient and, for every layer
//! but the first, whose input is the images, the input's) at batch 128 on 2 threads, what a
//! training step of the ResNet runs per layer. Rounds alternate the two sides, each a process
//! of its own: this binary's `contender` (burn-flex's `conv2d`, `conv2d_x_backward` and
//! `conv2d_weight_backward` called directly) and scripts/bench/convs.py (torch's `conv2d` and
//! autograd's backward). Within a round each side reports the fastest of 5 reps after 3
//! warm-up reps; the table gives the median over rounds. The last line is
//! `convs ember/PyTorch: forward X.XXx, backward Y.YYx (geometric means over 5 layers; >1:
//! ember faster)`.

// Shared with the benches that also time validation (`ValClock`), which this one does not.
#[allow(dead_code)]
#[path = "../../digits/benches/common/contest.rs"]
mod contest;
#[path = "../../digits/benches/common/rounds.rs"]
mod rounds;

use std::process::Command;
use std::time::Instant;

use burn::tensor::ops::{ConvOptions, ModuleOps};
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use burn_flex::{Flex, FlexDevice};
use contest::{python, run_contender};
use rounds::{median, rounds};

const BATCH: usize = 128;
const WARM_UP: usize = 3;
const REPS: usize = 5;

/// One convolution of the ResNet (bias-free, as in its model).
struct Layer {
    name: &'static str,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    /// Input height and width.
    side: usize,
    /// Whether its input takes a gradient (not the first layer's).
    x_grad: bool,
}

/// The ResNet's convolutions (handed to scripts/bench/convs.py too).
const LAYERS: [Layer; 5] = [
    layer("stem 3->32 3x3 32x32", [3, 32, 3, 1, 1, 32], false),
    layer("block 32->32 3x3 32x32", [32, 32, 3, 1, 1, 32], true),
    layer("down 32->64 3x3 s2 32x32", [32, 64, 3, 2, 1, 32], true),
    layer("shortcut 32->64 1x1 s2 32x32", [32, 64, 1, 2, 0, 32], true),
    layer("block 64->64 3x3 16x16", [64, 64, 3, 1, 1, 16], true),
];

const fn layer(name: &'static str, shape: [usize; 6], x_grad: bool) -> Layer {
    let [c_in, c_out, kernel, stride, padding, side] = shape;
    Layer {
        name,
        c_in,
        c_out,
        kernel,
        stride,
        padding,
        side,
        x_grad,
    }
}

type Float = burn::tensor::ops::FloatTensor<Flex>;

fn random(shape: [usize; 4]) -> Float {
    let tensor = Tensor::<Flex, 4>::random(shape, Distribution::Default, &FlexDevice);
    match tensor.into_primitive() {
        TensorPrimitive::Float(t) => t,
        TensorPrimitive::QFloat(_) => unreachable!("a random float tensor is not quantized"),
    }
}

/// The fastest forward and backward pass of `layer` on burn-flex, in milliseconds.
fn time_layer(layer: &Layer) -> [f64; 2] {
    let (s, p, k) = (layer.stride, layer.padding, layer.kernel);
    let options = ConvOptions::new([s, s], [p, p], [1, 1], 1);
    let out = (layer.side + 2 * p - k) / s + 1;
    let x = random([BATCH, layer.c_in, layer.side, layer.side]);
    let w = random([layer.c_out, layer.c_in, k, k]);
    let dy = random([BATCH, layer.c_out, out, out]);
    let mut best = [f64::INFINITY; 2];
    for rep in 0..WARM_UP + REPS {
        let start = Instant::now();
        let y = Flex::conv2d(x.clone(), w.clone(), None, options.clone());
        let forward = start.elapsed().as_secs_f64();
        drop(y);
        let start = Instant::now();
        if layer.x_grad {
            drop(Flex::conv2d_x_backward(
                x.clone(),
                w.clone(),
                dy.clone(),
                options.clone(),
            ));
        }
        drop(Flex::conv2d_weight_backward(
            x.clone(),
            w.clone(),
            dy.clone(),
            options.clone(),
        ));
        let backward = start.elapsed().as_secs_f64();
        if rep >= WARM_UP {
            best = [best[0].min(forward), best[1].min(backward)];
        }
    }
    best.map(|s| s * 1e3)
}

/// Prints this side's report: one JSON line as convs.py prints it.
fn contender() {
    let layers: Vec<serde_json::Value> = LAYERS
        .iter()
        .map(|layer| {
            let [forward, backward] = time_layer(layer);
            serde_json::json!({"name": layer.name, "forward_ms": forward, "backward_ms": backward})
        })
        .collect();
    println!("{}", serde_json::json!({ "layers": layers }));
}

/// One side's forward and backward milliseconds per layer, from its report; fails unless it
/// reports every layer of [`LAYERS`], in order, with both times.
fn times(side: &str, report: &serde_json::Value) -> anyhow::Result<Vec<[f64; 2]>> {
    let layers = report["layers"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("{side}: a report without layers: {report}"))?;
    anyhow::ensure!(
        layers.len() == LAYERS.len(),
        "{side}: a report of {} layers, {} expected",
        layers.len(),
        LAYERS.len()
    );
    let ms = |l: &serde_json::Value, key: &str| {
        l[key]
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("{side}: no {key} in {l}"))
    };
    (layers.iter().zip(&LAYERS))
        .map(|(l, layer)| {
            anyhow::ensure!(
                l["name"] == layer.name,
                "{side}: reported {} where {} was expected",
                l["name"],
                layer.name
            );
            Ok([ms(l, "forward_ms")?, ms(l, "backward_ms")?])
        })
        .collect()
}

/// [`LAYERS`] as the PyTorch side reads them: a JSON list of `[name, c_in, c_out, kernel,
/// stride, padding, side, x_grad]`.
fn layers_json() -> String {
    let rows: Vec<serde_json::Value> = (LAYERS.iter())
        .map(|l| {
            serde_json::json!([
                l.name, l.c_in, l.c_out, l.kernel, l.stride, l.padding, l.side, l.x_grad
            ])
        })
        .collect();
    serde_json::Value::from(rows).to_string()
}

/// Runs one side once and returns its times.
fn run_side(side: &str) -> anyhow::Result<Vec<[f64; 2]>> {
    let command = match side {
        "ember" => {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("contender").env("RAYON_NUM_THREADS", "2");
            c
        }
        _ => {
            let mut c = Command::new(python("convs")?);
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/bench/convs.py");
            c.args([
                script,
                &BATCH.to_string(),
                &REPS.to_string(),
                &layers_json(),
            ]);
            c
        }
    };
    times(side, &run_contender(side, command)?.0)
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("contender") {
        contender();
        return Ok(());
    }
    let rounds = rounds(3);
    let sides = ["ember", "torch"];
    // runs[side][round][layer]
    let mut runs: [Vec<Vec<[f64; 2]>>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for i in [round % 2, 1 - round % 2] {
            runs[i].push(run_side(sides[i])?);
        }
        println!("round {round} done");
    }
    let at = |side: usize, layer: usize, pass: usize| {
        median(runs[side].iter().map(|r| r[layer][pass]).collect())
    };
    println!(
        "{:<30} {:>12} {:>12} {:>8}   {:>12} {:>12} {:>8}",
        "layer (batch 128, 2 threads)",
        "fwd ember",
        "fwd torch",
        "ratio",
        "bwd ember",
        "bwd torch",
        "ratio"
    );
    let mut logs = [0.0f64; 2];
    for (l, layer) in LAYERS.iter().enumerate() {
        let mut line = format!("{:<30}", layer.name);
        for (pass, log) in logs.iter_mut().enumerate() {
            let (ember, torch) = (at(0, l, pass), at(1, l, pass));
            *log += (torch / ember).ln();
            line.push_str(&format!(
                " {ember:>9.2} ms {torch:>9.2} ms {:>7.2}x  ",
                torch / ember
            ));
        }
        println!("{}", line.trim_end());
    }
    let mean = |log: f64| (log / LAYERS.len() as f64).exp();
    println!(
        "convs ember/PyTorch: forward {:.2}x, backward {:.2}x (geometric means over {} layers; >1: ember faster)",
        mean(logs[0]),
        mean(logs[1]),
        LAYERS.len()
    );
    Ok(())
}
