//! The device type of the xla backend: one of the PJRT client's addressable devices.

use burn_backend::DeviceId;
use burn_std::device::Device;

/// An addressable device of the process's PJRT client, by index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct XlaDevice {
    /// The index among the client's addressable devices.
    pub index: usize,
}

impl XlaDevice {
    /// Device `index`.
    pub fn new(index: usize) -> Self {
        XlaDevice { index }
    }
}

/// The `type_id` burn's device ids carry for xla devices.
const TYPE_ID: u16 = 0x58;

impl Device for XlaDevice {
    fn from_id(id: DeviceId) -> Self {
        XlaDevice::new(usize::from(id.index_id))
    }

    fn to_id(&self) -> DeviceId {
        DeviceId::new(TYPE_ID, self.index as u16)
    }
}

impl burn_backend::backend::DeviceOps for XlaDevice {}
