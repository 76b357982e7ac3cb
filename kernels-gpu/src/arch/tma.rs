//! TMA (the tensor memory accelerator), sm_90: bulk tensor copies global -> shared described by
//! a `CUtensorMap` the host encodes (`cuTensorMapEncodeTiled`). One thread issues a copy of a
//! whole box; completion is signalled as transaction bytes on an mbarrier
//! (`mbarrier_arrive_expect_tx` announces them, the copy's `complete_tx` pays them back).
//!
//! The tensor map operand is a *generic* address of the 128-byte map, which must be 64-byte
//! aligned and live in the `.param` (a by-value kernel parameter), `.const` or `.global` state
//! space (global needs `fence.proxy.tensormap`, PTX 8.3, which the PTX 8.0 module cannot
//! express). Kernels therefore take maps as [`TensorMapParam`] parameters and address them with
//! [`param_tensor_map!`](crate::param_tensor_map).
//!
//! Coordinates are signed element indices, innermost (contiguous) dimension first; boxes that
//! reach outside the tensor are filled with zeros and still count their full size in bytes.
//! The shared destination must be 128-byte aligned (1024 for the 128B swizzle to start on its
//! pattern boundary).

/// An encoded tensor map (`CUtensorMap`): 128 opaque bytes, 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TensorMap(pub [u64; 16]);

/// A [`TensorMap`] as a by-value kernel parameter, and where in it the map lies: the ABI
/// crate's layout ([`flashrs_abi::tma`], which says why the padding), shared with the host.
/// Place every `TensorMapParam` before all other parameters; [`tensor_map_aligned`] checks at
/// run time.
pub use flashrs_abi::tma::{TENSOR_MAP_PARAM_OFFSET, TensorMapParam};

/// Generic address of the map inside a by-value [`TensorMapParam`] kernel parameter.
///
/// `param_tensor_map!(kernel_name, index)` names the kernel's `index`-th parameter (0-based) in
/// inline assembly and converts its `.param` address with `cvta.param` (PTX 7.7+), so the map is
/// read in place. Taking `&param` in Rust would instead make LLVM copy the parameter to local
/// memory, where TMA cannot read it. The kernel must be `#[unsafe(no_mangle)]` (PTX names its
/// parameters `<kernel>_param_<index>`).
#[macro_export]
macro_rules! param_tensor_map {
    ($kernel:ident, $index:literal) => {{
        let p: u64;
        unsafe {
            core::arch::asm!(
                concat!("mov.b64 {p}, ", stringify!($kernel), "_param_", stringify!($index),
                    "; cvta.param.u64 {p}, {p};"),
                p = out(reg64) p, options(pure, nomem, nostack))
        }
        (p + $crate::arch::tma::TENSOR_MAP_PARAM_OFFSET) as *const $crate::arch::tma::TensorMap
    }};
}

/// True when `map` is 64-byte aligned, as TMA requires (a misplaced [`TensorMapParam`] is not).
#[inline(always)]
pub fn tensor_map_aligned(map: *const TensorMap) -> bool {
    map as u64 % 64 == 0
}

/// `prefetch.tensormap`: pulls the map into the TMA unit's descriptor cache ahead of the first
/// copy (issue once per map, by the copying thread).
#[inline(always)]
pub unsafe fn prefetch_tensormap(map: *const TensorMap) {
    unsafe { core::arch::asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack)) }
}

/// `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes`: copies the
/// box at `(c0, c1)` (c0 innermost) into shared address `dst`, completing on mbarrier `bar`.
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_2d_g2s(dst: u32, map: *const TensorMap, c0: i32, c1: i32, bar: u32) {
    unsafe {
        core::arch::asm!(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c0}, {c1}}}], [{b}];",
            d = in(reg32) dst, m = in(reg64) map, c0 = in(reg32) c0, c1 = in(reg32) c1, b = in(reg32) bar,
            options(nostack))
    }
}

/// `cp.async.bulk.tensor.3d...`: the box at `(c0, c1, c2)`, see [`cp_async_bulk_tensor_2d_g2s`].
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_3d_g2s(dst: u32, map: *const TensorMap, c0: i32, c1: i32, c2: i32, bar: u32) {
    unsafe {
        core::arch::asm!(
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c0}, {c1}, {c2}}}], [{b}];",
            d = in(reg32) dst, m = in(reg64) map, c0 = in(reg32) c0, c1 = in(reg32) c1, c2 = in(reg32) c2,
            b = in(reg32) bar, options(nostack))
    }
}

/// `cp.async.bulk.tensor.4d...`: the box at `(c0, c1, c2, c3)`, see [`cp_async_bulk_tensor_2d_g2s`].
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_4d_g2s(dst: u32, map: *const TensorMap, c0: i32, c1: i32, c2: i32, c3: i32, bar: u32) {
    unsafe {
        core::arch::asm!(
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c0}, {c1}, {c2}, {c3}}}], [{b}];",
            d = in(reg32) dst, m = in(reg64) map, c0 = in(reg32) c0, c1 = in(reg32) c1, c2 = in(reg32) c2,
            c3 = in(reg32) c3, b = in(reg32) bar, options(nostack))
    }
}
