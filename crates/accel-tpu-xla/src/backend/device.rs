//! The device type of the xla backend: one of the PJRT client's addressable devices, or
//! several of them driven as one.

use burn_backend::DeviceId;
use burn_std::device::Device;

/// Addressable devices of the process's PJRT client: `span` of them from `index` on (on XLA's
/// CPU plugin, whose devices are all the same cores, the first `span` of a client of that
/// many devices, whatever `index` says; see `backend::clients`). One
/// device runs each program alone; several run each program as one SPMD program, every
/// tensor whole on each device except a batch's, which is split by rows among them (see
/// `ember_core::trainer::data::batching`), so the devices share the work of a step as data-parallel
/// replicas do, with the gradients' all-reduce inside the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct XlaDevice {
    /// The index of the (first) device among the client's addressable devices.
    pub index: usize,
    /// How many consecutive devices from `index` this device drives (1: just `index`).
    pub span: usize,
}

impl Default for XlaDevice {
    fn default() -> Self {
        XlaDevice::new(0)
    }
}

impl XlaDevice {
    /// Device `index`.
    pub fn new(index: usize) -> Self {
        XlaDevice { index, span: 1 }
    }

    /// The `span` devices from `index` on, driven as one.
    pub fn spanning(index: usize, span: usize) -> Self {
        XlaDevice {
            index,
            span: span.max(1),
        }
    }
}

/// The `type_id` burn's device ids carry for xla devices, in the low byte; the high byte holds
/// the span less one.
const TYPE_ID: u16 = 0x58;

impl Device for XlaDevice {
    fn from_id(id: DeviceId) -> Self {
        XlaDevice::spanning(usize::from(id.index_id), usize::from(id.type_id >> 8) + 1)
    }

    fn to_id(&self) -> DeviceId {
        let span = (self.span - 1).min(0xff) as u16;
        DeviceId::new(TYPE_ID | (span << 8), self.index as u16)
    }
}

impl burn_backend::backend::DeviceOps for XlaDevice {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_survives_its_id() {
        for device in [
            XlaDevice::new(0),
            XlaDevice::new(3),
            XlaDevice::spanning(0, 4),
        ] {
            assert_eq!(XlaDevice::from_id(device.to_id()), device);
        }
    }
}
