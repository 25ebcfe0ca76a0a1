//! ember: the PyTorch Lightning architecture for models written with burn.
//!
//! Depend on this crate with the features for the hardware you want (`cpu` is the default;
//! `cuda` and `wgpu` add those accelerators). [`registry`] returns a registry with every enabled
//! accelerator; add your own with [`Registry::register`] and run jobs through [`Cli`].

pub use burn;
pub use ember_core::*;

#[cfg(feature = "cpu")]
pub use ember_accel_cpu as cpu;
#[cfg(feature = "cuda")]
pub use ember_accel_cuda as cuda;
#[cfg(feature = "wgpu")]
pub use ember_accel_wgpu as wgpu;

/// A registry holding every accelerator this build enables (cpu, cuda, wgpu by feature).
pub fn registry<J: Job>() -> Registry<J> {
    let registry = Registry::new();
    #[cfg(feature = "cpu")]
    let registry = registry
        .register::<cpu::CpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "cuda")]
    let registry = registry
        .register::<cuda::CudaAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "wgpu")]
    let registry = registry
        .register::<wgpu::WgpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    registry
}
