//! A segment's structure as bytes: its ops with tensor ids numbered by first appearance and
//! scalar values left out. Two segments with the same signature lower to the same program
//! (up to the scalars that program takes as arguments), so a steady training step finds its
//! program without being lowered again.
//!
//! The bytes come from burn-ir's own serde derives, written by a small serializer that
//! renumbers `TensorId`s and sets each `ScalarIr`'s value aside with where it sits.

use std::collections::HashSet;

use burn_ir::{OperationIr, ScalarIr, TensorId};
use rustc_hash::FxHashMap;
use serde::ser::{self, Serialize};

/// The structure of a segment, and what varies between segments of the same structure.
pub struct Signature {
    /// The structure: equal bytes, equal programs.
    pub bytes: Vec<u8>,
    /// The tensor behind each number the bytes use, in order of first appearance.
    pub ids: Vec<TensorId>,
    /// Every scalar of the ops in serialization order, with the address it sits at (to match
    /// the scalars the emitter lifted, which it records by address).
    pub scalars: Vec<(ScalarIr, usize)>,
    /// The devices the segment's program runs on as one (1: a program for one device).
    pub devices: usize,
}

impl Signature {
    /// The signature of `ops`.
    pub fn of(ops: &[OperationIr]) -> Signature {
        let mut writer = Writer {
            sig: Signature {
                bytes: Vec::with_capacity(ops.len() * 64),
                ids: Vec::with_capacity(ops.len()),
                scalars: Vec::new(),
                devices: 1,
            },
            numbers: FxHashMap::with_capacity_and_hasher(ops.len(), Default::default()),
            in_id: false,
            scalar_at: None,
        };
        for op in ops {
            // Our serializer has no failure of its own, and burn-ir's derives add none.
            op.serialize(&mut writer)
                .expect("burn-ir ops serialize without error");
        }
        writer.sig
    }

    /// Marks the segment as one program over `devices` devices with the tensors of `split`
    /// divided by rows: programs for other layouts differ. The split tensors' numbers are
    /// appended to the bytes, then their count, so that the ops' bytes still end where they
    /// did.
    pub fn partitioned(&mut self, devices: usize, split: &HashSet<TensorId>) {
        self.devices = devices;
        let mut count = 0u32;
        for (number, id) in self.ids.iter().enumerate() {
            if split.contains(id) {
                self.bytes.extend((number as u32).to_le_bytes());
                count += 1;
            }
        }
        self.bytes.extend(count.to_le_bytes());
    }

    /// Which scalar sits at `address`: the index into [`Signature::scalars`].
    pub fn scalar_at(&self, address: usize) -> Option<usize> {
        let size = std::mem::size_of::<ScalarIr>();
        self.scalars
            .iter()
            .position(|(_, at)| (address..address + size).contains(at))
    }
}

/// The serializer: a compact, injective encoding (like bincode's) of one type's values.
struct Writer {
    sig: Signature,
    numbers: FxHashMap<TensorId, u32>,
    /// Inside a `TensorId`: its one `u64` is an id to renumber.
    in_id: bool,
    /// Inside a `ScalarIr` at this address: its one primitive is set aside.
    scalar_at: Option<usize>,
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unreachable")
    }
}

impl std::error::Error for Never {}

impl ser::Error for Never {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Never
    }
}

type Done = Result<(), Never>;

impl Writer {
    fn put(&mut self, bytes: &[u8]) -> Done {
        self.sig.bytes.extend_from_slice(bytes);
        Ok(())
    }

    /// An enum variant: its index.
    fn variant(&mut self, index: u32) -> Done {
        self.put(&index.to_le_bytes())
    }

    fn len(&mut self, len: usize) -> Done {
        self.put(&(len as u64).to_le_bytes())
    }

    /// Sets `value` aside if it is a scalar's; false if it is not.
    fn set_aside(&mut self, value: impl FnOnce() -> ScalarIr) -> bool {
        match self.scalar_at.take() {
            Some(address) => {
                self.sig.scalars.push((value(), address));
                true
            }
            None => false,
        }
    }

    fn id(&mut self, value: u64) -> Done {
        let id = TensorId::new(value);
        let next = self.numbers.len() as u32;
        let number = *self.numbers.entry(id).or_insert_with(|| {
            self.sig.ids.push(id);
            next
        });
        self.put(&number.to_le_bytes())
    }
}

/// Forwards every primitive `serialize_*` to `put` with its little-endian bytes.
macro_rules! primitives {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Done {
            self.put(&v.to_le_bytes())
        })*
    };
}

impl ser::Serializer for &mut Writer {
    type Ok = ();
    type Error = Never;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    primitives!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_u8: u8,
        serialize_u16: u16, serialize_u32: u32, serialize_f32: f32);

    fn serialize_f64(self, v: f64) -> Done {
        if self.set_aside(|| ScalarIr::Float(v)) {
            return Ok(());
        }
        self.put(&v.to_le_bytes())
    }
    fn serialize_i64(self, v: i64) -> Done {
        if self.set_aside(|| ScalarIr::Int(v)) {
            return Ok(());
        }
        self.put(&v.to_le_bytes())
    }
    fn serialize_u64(self, v: u64) -> Done {
        if self.set_aside(|| ScalarIr::UInt(v)) {
            return Ok(());
        }
        if self.in_id {
            return self.id(v);
        }
        self.put(&v.to_le_bytes())
    }
    fn serialize_bool(self, v: bool) -> Done {
        if self.set_aside(|| ScalarIr::Bool(v)) {
            return Ok(());
        }
        self.put(&[u8::from(v)])
    }
    fn serialize_char(self, v: char) -> Done {
        self.put(&u32::from(v).to_le_bytes())
    }
    fn serialize_str(self, v: &str) -> Done {
        self.len(v.len())?;
        self.put(v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        self.len(v.len())?;
        self.put(v)
    }
    fn serialize_none(self) -> Done {
        self.put(&[0])
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Done {
        self.put(&[1])?;
        v.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Done {
        self.variant(index)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        _: &'static str,
        v: &T,
    ) -> Done {
        self.variant(index)?;
        if name == "ScalarIr" {
            // The value is set aside, not written: it may change from segment to segment.
            self.scalar_at = Some(v as *const T as *const u8 as usize);
        }
        v.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, Never> {
        self.len(len.expect("burn-ir's sequences know their length"))?;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.variant(index)?;
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, Never> {
        self.len(len.expect("burn-ir's maps know their length"))?;
        Ok(self)
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Self, Never> {
        self.in_id = name == "TensorId";
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.variant(index)?;
        Ok(self)
    }
}

/// The compound serializers: their elements in order, nothing around them.
macro_rules! compound {
    ($($trait:ident::$method:ident),*) => {
        $(impl ser::$trait for &mut Writer {
            type Ok = ();
            type Error = Never;
            fn $method<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn end(self) -> Done {
                Ok(())
            }
        })*
    };
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for &mut Writer {
    type Ok = ();
    type Error = Never;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Done {
        k.serialize(&mut **self)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
        v.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

/// The serializers of named fields: their values in order. A struct's end also ends a
/// `TensorId`'s scope.
macro_rules! fields {
    ($($trait:ident),*) => {
        $(impl ser::$trait for &mut Writer {
            type Ok = ();
            type Error = Never;
            fn serialize_field<T: ?Sized + Serialize>(&mut self, _: &'static str, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn end(self) -> Done {
                self.in_id = false;
                Ok(())
            }
        })*
    };
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use burn_backend::{DType, Shape};
    use burn_ir::{NumericOperationIr, ScalarOpIr, TensorIr, TensorStatus};

    fn tensor(id: u64, dims: &[usize], status: TensorStatus) -> TensorIr {
        TensorIr {
            id: TensorId::new(id),
            shape: Shape::from(dims.to_vec()),
            status,
            dtype: DType::F32,
        }
    }

    /// `out = lhs + rhs` then `out2 = out * rhs2`.
    fn segment(ids: [u64; 3], dims: &[usize], scalars: [f64; 2]) -> Vec<OperationIr> {
        let op = |lhs: TensorIr, rhs: f64, out: TensorIr, mul: bool| {
            let o = ScalarOpIr {
                lhs,
                rhs: ScalarIr::Float(rhs),
                out,
            };
            let numeric = if mul {
                NumericOperationIr::MulScalar(o)
            } else {
                NumericOperationIr::AddScalar(o)
            };
            OperationIr::NumericFloat(DType::F32, numeric)
        };
        vec![
            op(
                tensor(ids[0], dims, TensorStatus::ReadOnly),
                scalars[0],
                tensor(ids[1], dims, TensorStatus::NotInit),
                false,
            ),
            op(
                tensor(ids[1], dims, TensorStatus::ReadWrite),
                scalars[1],
                tensor(ids[2], dims, TensorStatus::NotInit),
                true,
            ),
        ]
    }

    #[test]
    fn other_ids_and_scalar_values_give_the_same_structure() {
        let a = segment([3, 7, 9], &[2, 4], [0.5, 2.0]);
        let b = segment([40, 12, 41], &[2, 4], [-1.0, 3.0]);
        let (sa, sb) = (Signature::of(&a), Signature::of(&b));
        assert_eq!(sa.bytes, sb.bytes);
        assert_eq!(sa.ids, [3, 7, 9].map(TensorId::new));
        assert_eq!(sb.ids, [40, 12, 41].map(TensorId::new));
        let values = |s: &Signature| s.scalars.iter().map(|(v, _)| *v).collect::<Vec<_>>();
        assert_eq!(values(&sb), [ScalarIr::Float(-1.0), ScalarIr::Float(3.0)]);
    }

    #[test]
    fn shapes_statuses_and_the_order_of_ids_are_structure() {
        let base = Signature::of(&segment([3, 7, 9], &[2, 4], [0.5, 2.0])).bytes;
        let shape = Signature::of(&segment([3, 7, 9], &[4, 2], [0.5, 2.0])).bytes;
        // The second op reads the first input rather than the first op's output.
        let wiring = Signature::of(&segment([3, 3, 9], &[2, 4], [0.5, 2.0])).bytes;
        let mut status = segment([3, 7, 9], &[2, 4], [0.5, 2.0]);
        if let OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(o)) = &mut status[1] {
            o.lhs.status = TensorStatus::ReadOnly;
        }
        let status = Signature::of(&status).bytes;
        for other in [shape, wiring, status] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn a_scalar_is_found_by_the_address_of_the_ops_field() {
        let ops = segment([3, 7, 9], &[2, 4], [0.5, 2.0]);
        let sig = Signature::of(&ops);
        let OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(o)) = &ops[1] else {
            unreachable!()
        };
        assert_eq!(sig.scalar_at(&o.rhs as *const ScalarIr as usize), Some(1));
        let copy = o.rhs;
        assert_eq!(sig.scalar_at(&copy as *const ScalarIr as usize), None);
    }
}
