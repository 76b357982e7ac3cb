//! A TMA tensor map as a by-value kernel parameter.

/// A `CUtensorMap` (128 bytes) as a by-value kernel parameter: 48 bytes of padding, the map,
/// 16 bytes of padding (192 bytes).
///
/// TMA needs the map 64-byte aligned, but rustc's `ptx-kernel` ABI cannot declare a parameter
/// aligned beyond 16 bytes (an `align(64)` struct makes it panic), and ptxas lays parameters
/// out by their absolute offset in the constant bank, which starts at 0x210 (16 mod 64) on
/// sm_90. A `TensorMapParam` that starts the parameter list (or follows other
/// `TensorMapParam`s: the size is a multiple of 64) has its map at bank offset 0x240 + 192 * i,
/// 64-byte aligned. Every `TensorMapParam` goes before all other parameters of a kernel; the
/// device side checks the alignment at run time.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapParam {
    /// Padding that puts [`TensorMapParam::map`] on a 64-byte boundary.
    pub head: [u64; 6],
    /// The encoded map (`CUtensorMap` bytes).
    pub map: [u64; 16],
    /// Padding to a multiple of 64 bytes.
    pub tail: [u64; 2],
}

/// Byte offset of [`TensorMapParam::map`] within the parameter.
pub const TENSOR_MAP_PARAM_OFFSET: u64 = 48;

impl TensorMapParam {
    /// The parameter holding `map`.
    pub const fn new(map: [u64; 16]) -> Self {
        TensorMapParam { head: [0; 6], map, tail: [0; 2] }
    }
}

const _: () = assert!(core::mem::size_of::<TensorMapParam>() == 192);
const _: () = assert!(core::mem::offset_of!(TensorMapParam, map) as u64 == TENSOR_MAP_PARAM_OFFSET);
