//! TMA tensor maps (`CUtensorMap`): the 128-byte descriptors Hopper's tensor memory accelerator
//! copies tiles with, encoded on the host by the driver's `cuTensorMapEncodeTiled`.
//!
//! A map describes a strided tensor in global memory (up to 5 dimensions, innermost first) and
//! the box (tile) one copy moves into shared memory, with an optional shared-memory swizzle.
//! It holds the raw device address: it must not outlive the buffer it points into.
//!
//! Kernels take maps as [`TensorMapParam`] parameters placed before all their other parameters
//! (see that type for why); `kernels-gpu/src/arch/tma.rs` is the device side.
use crate::driver::Driver;
use crate::error::{Error, Result};

/// The most dimensions a tensor map describes.
pub const MAX_RANK: usize = 5;

/// Element type of the tensor (`CUtensorMapDataType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum TensorDataType {
    /// `u8`.
    U8 = 0,
    /// `u16`.
    U16 = 1,
    /// `u32`.
    U32 = 2,
    /// `i32`.
    I32 = 3,
    /// `u64`.
    U64 = 4,
    /// `i64`.
    I64 = 5,
    /// IEEE binary16.
    F16 = 6,
    /// `f32`.
    F32 = 7,
    /// `f64`.
    F64 = 8,
    /// bfloat16.
    Bf16 = 9,
    /// `f32`, denormals flushed to zero.
    F32Ftz = 10,
    /// tf32 (stored as 32 bits).
    Tf32 = 11,
    /// tf32, denormals flushed to zero.
    Tf32Ftz = 12,
}

impl TensorDataType {
    /// Bytes per element.
    pub fn size_bytes(self) -> u32 {
        use TensorDataType::*;
        match self {
            U8 => 1,
            U16 | F16 | Bf16 => 2,
            U32 | I32 | F32 | F32Ftz | Tf32 | Tf32Ftz => 4,
            U64 | I64 | F64 => 8,
        }
    }

    fn is_float(self) -> bool {
        use TensorDataType::*;
        matches!(self, F16 | F32 | F64 | Bf16 | F32Ftz | Tf32 | Tf32Ftz)
    }
}

/// Interleaved layouts (`CUtensorMapInterleave`), for NC/8HWC8-style tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum Interleave {
    /// Plain strided tensor.
    #[default]
    None = 0,
    /// 16-byte interleave.
    B16 = 1,
    /// 32-byte interleave (needs [`Swizzle::B32`]).
    B32 = 2,
}

/// Shared-memory swizzle of the box (`CUtensorMapSwizzle`). With swizzle `S` bytes, the
/// 16-byte chunk `c` of box row `r` lands at chunk `c ^ (r % (S / 16))` of its `S`-byte row
/// (for 128 B: `c ^ (r % 8)`, repeating every 1024 bytes), which is the layout the wgmma
/// descriptors' swizzle modes read. The box's inner dimension must span at most `S` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum Swizzle {
    /// Box rows stored densely, in order.
    #[default]
    None = 0,
    /// 32-byte swizzle.
    B32 = 1,
    /// 64-byte swizzle.
    B64 = 2,
    /// 128-byte swizzle.
    B128 = 3,
}

impl Swizzle {
    /// Span of the pattern's rows in bytes (`None` for no swizzle).
    pub fn span_bytes(self) -> Option<u32> {
        match self {
            Swizzle::None => None,
            Swizzle::B32 => Some(32),
            Swizzle::B64 => Some(64),
            Swizzle::B128 => Some(128),
        }
    }
}

/// How much L2 each request may pull in (`CUtensorMapL2promotion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum L2Promotion {
    /// No promotion.
    None = 0,
    /// 64 bytes.
    B64 = 1,
    /// 128 bytes.
    #[default]
    B128 = 2,
    /// 256 bytes.
    B256 = 3,
}

/// What out-of-bounds box elements read as (`CUtensorMapFloatOOBfill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum OobFill {
    /// Zeros.
    #[default]
    Zeros = 0,
    /// A NaN that FMA treats as zero (float types only).
    NanRequestZeroFma = 1,
}

/// An encoded tensor map: `CUtensorMap`, 128 opaque bytes, 64-byte aligned. Kernels take it as
/// a [`TensorMapParam`].
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TensorMap {
    opaque: [u64; 16],
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorMap(")?;
        for (i, w) in self.opaque.iter().enumerate() {
            write!(f, "{}{w:016x}", if i == 0 { "" } else { " " })?;
        }
        write!(f, ")")
    }
}

impl TensorMap {
    /// Starts describing a tiled (box) map over the tensor at device address `global_address`
    /// with `dims` elements per dimension and `strides_bytes` between consecutive indices of
    /// dimensions 1.. (`dims.len() - 1` entries; dimension 0 is contiguous). `box_dims` is the
    /// box copied per TMA instruction, in elements, innermost first. Everything else has a
    /// default ([`TiledTensorMap`]); [`TiledTensorMap::encode`] checks and encodes.
    pub fn tiled(
        dtype: TensorDataType,
        global_address: u64,
        dims: &[u64],
        strides_bytes: &[u64],
        box_dims: &[u32],
    ) -> TiledTensorMap {
        TiledTensorMap {
            dtype,
            global_address,
            dims: dims.to_vec(),
            strides_bytes: strides_bytes.to_vec(),
            box_dims: box_dims.to_vec(),
            element_strides: vec![1; box_dims.len()],
            interleave: Interleave::None,
            swizzle: Swizzle::None,
            l2_promotion: L2Promotion::default(),
            oob_fill: OobFill::Zeros,
        }
    }

    /// A row-major matrix of `rows` x `cols` elements, `row_stride` elements apart, read in
    /// `box_rows` x `box_cols` boxes (coordinates on the device: column first, then row).
    #[allow(clippy::too_many_arguments)]
    pub fn matrix(
        dtype: TensorDataType,
        global_address: u64,
        rows: u64,
        cols: u64,
        row_stride: u64,
        box_rows: u32,
        box_cols: u32,
        swizzle: Swizzle,
    ) -> Result<TensorMap> {
        let stride = row_stride * dtype.size_bytes() as u64;
        TensorMap::tiled(dtype, global_address, &[cols, rows], &[stride], &[box_cols, box_rows])
            .swizzle(swizzle)
            .encode()
    }

    /// The raw 128 bytes.
    pub fn as_words(&self) -> &[u64; 16] {
        &self.opaque
    }

    /// This map as a kernel parameter.
    pub fn param(&self) -> TensorMapParam {
        TensorMapParam(flashrs_abi::tma::TensorMapParam::new(self.opaque))
    }
}

/// A [`TensorMap`] as a by-value kernel parameter: the ABI's layout
/// ([`flashrs_abi::tma::TensorMapParam`], which says why it pads the map to 192 bytes). Every
/// `TensorMapParam` comes before all other parameters of a kernel.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapParam(pub flashrs_abi::tma::TensorMapParam);

impl From<TensorMap> for TensorMapParam {
    fn from(m: TensorMap) -> Self {
        m.param()
    }
}

/// Description of a tiled tensor map being built (from [`TensorMap::tiled`]).
#[derive(Clone, Debug)]
pub struct TiledTensorMap {
    dtype: TensorDataType,
    global_address: u64,
    dims: Vec<u64>,
    strides_bytes: Vec<u64>,
    box_dims: Vec<u32>,
    element_strides: Vec<u32>,
    interleave: Interleave,
    swizzle: Swizzle,
    l2_promotion: L2Promotion,
    oob_fill: OobFill,
}

impl TiledTensorMap {
    /// Traversal stride per dimension (1..=8 elements; default 1: every element).
    pub fn element_strides(mut self, strides: &[u32]) -> Self {
        self.element_strides = strides.to_vec();
        self
    }

    /// Interleaved layout (default none).
    pub fn interleave(mut self, interleave: Interleave) -> Self {
        self.interleave = interleave;
        self
    }

    /// Shared-memory swizzle (default none).
    pub fn swizzle(mut self, swizzle: Swizzle) -> Self {
        self.swizzle = swizzle;
        self
    }

    /// L2 promotion (default 128 bytes).
    pub fn l2_promotion(mut self, l2: L2Promotion) -> Self {
        self.l2_promotion = l2;
        self
    }

    /// Out-of-bounds fill (default zeros).
    pub fn oob_fill(mut self, fill: OobFill) -> Self {
        self.oob_fill = fill;
        self
    }

    /// Bytes one box occupies in shared memory (and the transaction bytes a copy completes).
    pub fn box_bytes(&self) -> u64 {
        let elems: u64 = self
            .box_dims
            .iter()
            .zip(self.element_strides.iter().chain(std::iter::repeat(&1)))
            .map(|(&b, &s)| (b as u64).div_ceil(s.max(1) as u64))
            .product();
        elems * self.dtype.size_bytes() as u64
    }

    /// Checks the constraints `cuTensorMapEncodeTiled` documents, with a message naming the
    /// broken one (the driver itself only says "invalid value").
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidShape { what: "tensor map", reason });
        let rank = self.dims.len();
        let esize = self.dtype.size_bytes() as u64;
        if !(1..=MAX_RANK).contains(&rank) {
            return bad(format!("rank {rank} is not in 1..={MAX_RANK}"));
        }
        if self.interleave != Interleave::None && rank < 3 {
            return bad(format!("interleaved layouts need rank 3 or more, got {rank}"));
        }
        if self.strides_bytes.len() != rank - 1 {
            return bad(format!("{} strides given for rank {rank} (need {})", self.strides_bytes.len(), rank - 1));
        }
        if self.box_dims.len() != rank || self.element_strides.len() != rank {
            return bad(format!(
                "box has {} dims and element strides {} for rank {rank}",
                self.box_dims.len(),
                self.element_strides.len()
            ));
        }
        let addr_align = if self.interleave == Interleave::B32 { 32 } else { 16 };
        if self.global_address == 0 || !self.global_address.is_multiple_of(addr_align) {
            return bad(format!("global address {:#x} is not a non-null multiple of {addr_align}", self.global_address));
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if d == 0 || d > 1 << 32 {
                return bad(format!("dimension {i} has {d} elements (1..=2^32 allowed)"));
            }
        }
        let stride_align = if self.interleave == Interleave::B32 { 32 } else { 16 };
        for (i, &s) in self.strides_bytes.iter().enumerate() {
            if s % stride_align != 0 || s >= 1 << 40 {
                return bad(format!("stride of dimension {} is {s} bytes (multiple of {stride_align} below 2^40 needed)", i + 1));
            }
        }
        for (i, (&b, &e)) in self.box_dims.iter().zip(&self.element_strides).enumerate() {
            if !(1..=256).contains(&b) {
                return bad(format!("box dimension {i} is {b} (1..=256 allowed)"));
            }
            if !(1..=8).contains(&e) {
                return bad(format!("element stride {i} is {e} (1..=8 allowed)"));
            }
        }
        let inner_bytes = self.box_dims[0] as u64 * esize;
        if self.interleave == Interleave::None {
            if !inner_bytes.is_multiple_of(16) {
                return bad(format!("the box's inner dimension spans {inner_bytes} bytes, not a multiple of 16"));
            }
            if let Some(span) = self.swizzle.span_bytes()
                && inner_bytes > span as u64
            {
                return bad(format!("the box's inner dimension spans {inner_bytes} bytes, more than the {span}-byte swizzle"));
            }
        }
        if self.interleave == Interleave::B32 && self.swizzle != Swizzle::B32 {
            return bad("32-byte interleave needs the 32-byte swizzle".into());
        }
        if self.oob_fill == OobFill::NanRequestZeroFma && !self.dtype.is_float() {
            return bad(format!("NaN fill needs a floating-point type, not {:?}", self.dtype));
        }
        Ok(())
    }

    /// Validates and encodes the map with `cuTensorMapEncodeTiled` (no GPU work; a [`Gpu`]
    /// must have been opened, which loads the driver).
    ///
    /// [`Gpu`]: crate::Gpu
    pub fn encode(&self) -> Result<TensorMap> {
        self.validate()?;
        let d = Driver::get()?;
        let mut map = TensorMap { opaque: [0; 16] };
        // SAFETY: every array holds at least `rank` (strides: `rank - 1`) entries, as
        // `validate` checked; `map` is a writable, 64-byte-aligned 128-byte buffer. The global
        // address is only recorded, not dereferenced.
        let r = unsafe {
            (d.tensor_map_encode_tiled)(
                &mut map as *mut TensorMap as *mut std::ffi::c_void,
                self.dtype as u32,
                self.dims.len() as u32,
                self.global_address as *mut std::ffi::c_void,
                self.dims.as_ptr(),
                self.strides_bytes.as_ptr(),
                self.box_dims.as_ptr(),
                self.element_strides.as_ptr(),
                self.interleave as u32,
                self.swizzle as u32,
                self.l2_promotion as u32,
                self.oob_fill as u32,
            )
        };
        d.check("cuTensorMapEncodeTiled", r)?;
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_matrix() -> TiledTensorMap {
        TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[384], &[64, 64])
    }

    #[test]
    fn layout_matches_the_driver_and_the_device() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
        assert_eq!(std::mem::size_of::<TensorMapParam>(), 192);
        let mut m = TensorMap { opaque: [0; 16] };
        m.opaque[0] = 7;
        m.opaque[15] = 9;
        let p = m.param();
        // SAFETY: `TensorMapParam` is 24 plain u64 words.
        let words: [u64; 24] = unsafe { std::mem::transmute(p) };
        assert_eq!((words[6], words[21]), (7, 9));
    }

    #[test]
    fn accepts_a_swizzled_f16_tile() {
        let t = f16_matrix().swizzle(Swizzle::B128);
        t.validate().unwrap();
        assert_eq!(t.box_bytes(), 64 * 64 * 2);
        // The largest Hopper Q box: 192 rows (three consumer warpgroups) of a BSHD tensor.
        let q = TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[64, 1000, 4, 2], &[512, 128, 512_000], &[64, 192, 1, 1])
            .swizzle(Swizzle::B128);
        q.validate().unwrap();
        assert_eq!(q.box_bytes(), 192 * 128);
    }

    #[test]
    fn rejects_what_the_driver_would() {
        let cases: Vec<(TiledTensorMap, &str)> = vec![
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0008, &[192, 256], &[384], &[64, 64]), "global address"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[392], &[64, 64]), "stride"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[], &[64, 64]), "strides given"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[384], &[64, 512]), "box dimension 1"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[384], &[4, 64]), "multiple of 16"),
            (f16_matrix().element_strides(&[1, 9]), "element stride"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[192, 256], &[384], &[128, 64]).swizzle(Swizzle::B128), "swizzle"),
            (TensorMap::tiled(TensorDataType::U8, 0x7000_0000, &[192, 256], &[192], &[64, 64]).oob_fill(OobFill::NanRequestZeroFma), "NaN"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[0, 256], &[384], &[64, 64]), "dimension 0"),
            (TensorMap::tiled(TensorDataType::F16, 0x7000_0000, &[1; 6], &[16; 5], &[1; 6]), "rank"),
        ];
        for (t, needle) in cases {
            match t.validate() {
                Err(Error::InvalidShape { reason, .. }) => assert!(reason.contains(needle), "{reason:?} lacks {needle:?}"),
                other => panic!("expected a rejection mentioning {needle:?}, got {other:?}"),
            }
        }
    }
}
