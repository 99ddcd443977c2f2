//! The array `ganges array write` generates when no file is given: each element holds its own
//! row-major index in the array's element type (`numpy.arange(n).reshape(shape).astype(dtype)`),
//! so any piece read back can be checked anywhere without the original.

use super::{DType, Region, Schema};

/// The generated elements of `region`, row-major over it.
pub fn generated(schema: &Schema, region: &Region) -> Vec<u8> {
    let elem = schema.dtype.size() as usize;
    let mut out = Vec::with_capacity(region.elements() as usize * elem);
    let mut strides = vec![1u64; schema.rank()];
    for d in (0..schema.rank().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * schema.shape[d + 1];
    }
    walk(schema.dtype, region, &strides, 0, 0, &mut out);
    out
}

fn walk(dtype: DType, region: &Region, strides: &[u64], d: usize, base: u64, out: &mut Vec<u8>) {
    for r in &region.dims[d] {
        for g in r.clone() {
            let at = base + g * strides[d];
            if d + 1 == region.dims.len() {
                push(dtype, at, out);
            } else {
                walk(dtype, region, strides, d + 1, at, out);
            }
        }
    }
}

fn push(dtype: DType, i: u64, out: &mut Vec<u8>) {
    match dtype {
        DType::U8 => out.push(i as u8),
        DType::I8 => out.push(i as i8 as u8),
        DType::U16 => out.extend_from_slice(&(i as u16).to_le_bytes()),
        DType::I16 => out.extend_from_slice(&(i as i16).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(i as u32).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(i as i32).to_le_bytes()),
        DType::F32 => out.extend_from_slice(&(i as f32).to_le_bytes()),
        DType::U64 => out.extend_from_slice(&i.to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(i as i64).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&(i as f64).to_le_bytes()),
    }
}
