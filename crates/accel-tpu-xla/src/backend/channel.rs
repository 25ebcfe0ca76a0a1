//! The burn-router channel of the xla backend: one lazy client per device, and moves between
//! devices through the host.

use burn_backend::{DType, Shape, TensorData};
use burn_ir::TensorIr;
use burn_router::{MultiBackendBridge, RouterTensor, RunnerChannel, RunnerClient, TensorHandle};

use super::client::XlaClient;
use super::device::XlaDevice;

/// The channel type `BackendRouter` is instantiated with.
#[derive(Clone, Default)]
pub struct XlaChannel;

/// Moves a tensor between xla devices as host data (read on one client, uploaded on the other).
pub struct HostBridge;

impl MultiBackendBridge for HostBridge {
    type TensorHandle = TensorData;
    type Device = XlaDevice;

    fn change_backend_float(tensor: TensorData, _: Shape, _: &XlaDevice) -> TensorData {
        tensor
    }

    fn change_backend_int(tensor: TensorData, _: Shape, _: &XlaDevice) -> TensorData {
        tensor
    }

    fn change_backend_bool(tensor: TensorData, _: Shape, _: &XlaDevice) -> TensorData {
        tensor
    }
}

impl RunnerChannel for XlaChannel {
    type Device = XlaDevice;
    type Bridge = HostBridge;
    type Client = XlaClient;
    type FloatElem = f32;
    type IntElem = i32;
    type BoolElem = bool;

    fn name(device: &XlaDevice) -> String {
        match device.span {
            1 => format!("xla:{}", device.index),
            span => format!("xla:{}-{}", device.index, device.index + span - 1),
        }
    }

    fn init_client(device: &XlaDevice) -> XlaClient {
        XlaClient::new(*device)
    }

    fn get_tensor_handle(tensor: &TensorIr, client: &XlaClient) -> TensorHandle<HostBridge> {
        burn_std::future::block_on(client.read_tensor_async(tensor.clone()))
            .unwrap_or_else(|e| panic!("xla: moving a tensor between devices: {e}"))
    }

    fn register_tensor(
        client: &XlaClient,
        handle: TensorData,
        _: Shape,
        _: DType,
    ) -> RouterTensor<XlaClient> {
        client.register_tensor_data(handle)
    }
}
