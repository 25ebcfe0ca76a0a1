//! Each real accelerator in this build runs a forward and backward pass on its own backend
//! where its hardware is present (cpu always; cuda, wgpu, tch-cpu, tch-cuda and xla by
//! feature; wgpu on lavapipe in CI, xla on XLA's CPU plugin).

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{ElementConversion, Tensor, TensorData};
use ember::Accelerator;

/// One gradient step's worth of work on accelerator `A`'s first device; `None` when absent.
fn gradient_norm<A: Accelerator>() -> Option<f32> {
    if !A::is_available() {
        eprintln!(
            "skip: {} has no device on this machine; its planning rules are covered by the connector tests",
            A::name()
        );
        return None;
    }
    let device = A::parallel_devices(&[0]).remove(0);
    let layer: Linear<A::Backend> = LinearConfig::new(4, 2).init(&device);
    let x = Tensor::<A::Backend, 2>::from_data(TensorData::new(vec![0.5f32; 12], [3, 4]), &device);
    let loss = layer.forward(x).powi_scalar(2).mean();
    let grads = loss.backward();
    let weight_grad = layer
        .weight
        .grad(&grads)
        .expect("the weight has a gradient");
    let norm: f32 = weight_grad.powi_scalar(2).sum().sqrt().into_scalar().elem();
    let _ = A::device_stats(&device);
    assert_eq!(layer.num_params(), 10);
    Some(norm)
}

#[test]
fn cpu_runs_a_backward_pass() {
    let norm = gradient_norm::<ember::cpu::CpuAccelerator>().expect("cpu is always there");
    assert!(norm.is_finite() && norm > 0.0, "{norm}");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_runs_a_backward_pass_where_present() {
    if let Some(norm) = gradient_norm::<ember::cuda::CudaAccelerator>() {
        assert!(norm.is_finite() && norm > 0.0, "{norm}");
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_runs_a_backward_pass_where_present() {
    if let Some(norm) = gradient_norm::<ember::wgpu::WgpuAccelerator>() {
        assert!(norm.is_finite() && norm > 0.0, "{norm}");
    }
}

#[cfg(feature = "tch")]
#[test]
fn tch_cpu_runs_a_backward_pass() {
    let norm = gradient_norm::<ember::tch::TchCpuAccelerator>().expect("the host CPU is there");
    assert!(norm.is_finite() && norm > 0.0, "{norm}");
}

#[cfg(feature = "tch")]
#[test]
fn tch_cuda_runs_a_backward_pass_where_present() {
    if let Some(norm) = gradient_norm::<ember::tch::TchCudaAccelerator>() {
        assert!(norm.is_finite() && norm > 0.0, "{norm}");
    }
}

/// xla on whatever PJRT plugin is found (XLA's CPU plugin, cached by scripts/setup.sh, in CI).
#[cfg(feature = "tpu-xla")]
#[test]
fn xla_runs_a_backward_pass_where_a_plugin_is_found() {
    if let Some(norm) = gradient_norm::<ember::xla::XlaAccelerator>() {
        assert!(norm.is_finite() && norm > 0.0, "{norm}");
    }
}
