//! Manual optimization under 16-mixed: `ManualOptimization::compute` gives the f16 compute
//! copy, `backward` scales the loss and `step` unscales, checks and updates the loss scaler
//! as the automatic step does, bitwise (`HalfCpu`: burn-flex declared with 16-mixed, in a
//! process of its own since a device holds one float type).

use ember::{Plan, Precision, Trainer};
use ember_acceptance::HalfCpu;
use ember_acceptance::pair::{B, Mode, fit_with, options};
use ember_acceptance::regression::serial;

#[test]
fn under_16_mixed_the_manual_step_scales_and_unscales_as_the_automatic_one() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::local("halfcpu", Precision::F16Mixed);
    let run = |mode| {
        let trainer = Trainer::<B>::new::<HalfCpu>(&plan, options(dir.path())).unwrap();
        fit_with(trainer, mode, None).unwrap()
    };
    let automatic = run(Mode::Automatic);
    let manual = run(Mode::ManualOne);
    assert_eq!(manual.weights, automatic.weights);
    assert_eq!(manual.losses, automatic.losses);
}
