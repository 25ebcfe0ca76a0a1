//! Which PJRT client an xla device's buffers and programs live on.

use burn::tensor::Tensor;
use ember_accel_tpu_xla::backend::runtime;
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;

/// On XLA's CPU plugin a device lives on a client of exactly as many devices as it spans,
/// whatever its index (every CPU device is the same cores): a process that drives one device
/// runs no threads for the plugin's other three. Devices of one span share that client.
#[test]
fn a_cpu_device_lives_on_a_client_of_its_span() {
    if !common::plugin_found() {
        return;
    }
    let rt = runtime::runtime().expect("the plugin loads");
    if rt.platform() != "cpu" {
        eprintln!(
            "skip: the plugin is {}, not XLA's CPU plugin",
            rt.platform()
        );
        return;
    }
    assert_eq!(rt.device_count(), 4, "the CPU plugin's default count");
    for (device, devices) in [
        (XlaDevice::new(0), 1),
        (XlaDevice::new(3), 1),
        (XlaDevice::spanning(0, 2), 2),
        (XlaDevice::spanning(0, 4), 4),
    ] {
        let at = rt.placement(&device).unwrap();
        assert_eq!(at.client.device_count(), devices, "{device:?}");
        assert_eq!(at.first, 0, "{device:?}");
    }
    let client = |device| rt.placement(&device).unwrap().client;
    assert!(std::ptr::eq(
        client(XlaDevice::new(0)),
        client(XlaDevice::new(3))
    ));

    // Device 3 computes on its client's device 0, and a move between devices of one client
    // goes through the host as any other.
    let values = common::values(5, 1);
    let x = Tensor::<Xla, 1>::from_floats(values.as_slice(), &XlaDevice::new(3));
    let y = (x * 2.0).to_device(&XlaDevice::new(1)) + 1.0;
    let expected: Vec<f32> = values.iter().map(|v| v * 2.0 + 1.0).collect();
    assert_eq!(y.into_data().to_vec::<f32>().unwrap(), expected);
}
