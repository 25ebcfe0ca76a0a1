//! burn-ir ops lowered to StableHLO, one module per family.

mod base;
mod conv;
mod elementwise;
mod module;
mod numeric;
mod pool;

use burn_ir::OperationIr;

use super::func::{Function, Unsupported};

/// Emits the StableHLO for one recorded op into `f`. `Drop`, `Init` and random ops are the
/// recorder's business and never reach here.
pub fn lower(f: &mut Function, op: &OperationIr) -> Result<(), Unsupported> {
    match op {
        OperationIr::BaseFloat(o) => base::lower(f, o, "float"),
        OperationIr::BaseInt(o) => base::lower(f, o, "int"),
        OperationIr::BaseBool(o) => base::lower(f, o, "bool"),
        OperationIr::NumericFloat(_, o) => numeric::lower(f, o, "float"),
        OperationIr::NumericInt(_, o) => numeric::lower(f, o, "int"),
        OperationIr::Float(_, o) => elementwise::float(f, o),
        OperationIr::Int(o) => elementwise::int(f, o),
        OperationIr::Bool(o) => elementwise::bool(f, o),
        OperationIr::Module(o) => module::lower(f, o),
        OperationIr::Custom(o) => Err(Unsupported(format!("custom op {}", o.id))),
        OperationIr::Init(_) | OperationIr::Drop(_) => Ok(()),
    }
}
