//! The merge kernel ([`flashrs_abi::merge`]): folds one partial attention result into a
//! running f32 one, or, the last time, writes the merged output.
//!
//! One warp per (batch, row, head), heads fastest so that consecutive warps read consecutive
//! memory; lane `c` takes columns `8c .. 8c + 8` (16 bytes of a 16-bit row, two 16-byte
//! chunks of the f32 accumulator). The weights come from the two log-sum-exps alone, so a part
//! or an accumulator of weight 0 is not read: the first part's accumulator is never
//! initialised, and rows a part does not cover keep their accumulator unchanged.
use crate::arch::ids::{block_idx_x, thread_idx_x};
use crate::dtype::{Bf16, Element, F16};
use crate::lse;
use crate::vector::Chunk;
use flashrs_abi::merge::{MERGE_COLS, MERGE_FIRST, MERGE_LAST, MERGE_THREADS, MergeParams};

/// Loads `MERGE_COLS` f32 from a 16-byte aligned address.
#[inline(always)]
unsafe fn load_f32(src: *const f32) -> [f32; MERGE_COLS] {
    let c = src as *const Chunk;
    let (a, b) = unsafe { (*c, *c.add(1)) };
    core::array::from_fn(|i| f32::from_bits(if i < 4 { a.0[i] } else { b.0[i - 4] }))
}

/// The merge of one (batch, row, head) per warp (see the module docs).
#[inline(always)]
unsafe fn merge<T: Element>(p: &MergeParams) {
    let warp = block_idx_x() as u64 * (MERGE_THREADS / 32) as u64 + (thread_idx_x() / 32) as u64;
    // (The zero checks also keep the divisions below free of a panic path.)
    if warp >= p.warps() || p.heads == 0 || p.n_rows == 0 {
        return;
    }
    let (heads, rows) = (p.heads as u64, p.rows as u64);
    let h = warp % heads;
    let r = (warp / heads) % p.n_rows as u64 + p.row0 as u64;
    let b = warp / heads / p.n_rows as u64;
    let (first, last) = (p.flags & MERGE_FIRST != 0, p.flags & MERGE_LAST != 0);
    let part_r = r.wrapping_sub(p.part_row0 as u64);
    let in_part = part_r < p.part_rows as u64;

    let lse_at = ((b * heads + h) * rows + r) as usize;
    let la = if first { f32::NEG_INFINITY } else { unsafe { *(p.acc_lse as *const f32).add(lse_at) } };
    let part_lse_at = ((b * heads + h) * p.part_rows as u64 + part_r) as usize;
    let lp = if in_part { unsafe { *(p.part_lse as *const f32).add(part_lse_at) } } else { f32::NEG_INFINITY };
    let base = lse::merge_base(la.max(lp));
    let (wa, wp) = (lse::part_weight(la, base), lse::part_weight(lp, base));
    let sum = wa + wp;
    let inv = lse::inv_sum(sum);
    let (ca, cp) = (wa * inv, wp * inv);

    let col = thread_idx_x() as usize % 32 * MERGE_COLS;
    let at = ((b * rows + r) * heads + h) as usize * p.head_dim as usize + col;
    if col < p.head_dim as usize {
        let mut o = [0.0f32; MERGE_COLS];
        if ca != 0.0 {
            let a = unsafe { load_f32((p.acc as *const f32).add(at)) };
            for i in 0..MERGE_COLS {
                o[i] = ca * a[i];
            }
        }
        if cp != 0.0 {
            let c = unsafe { *((p.part as *const u16).add(at) as *const Chunk) };
            for i in 0..MERGE_COLS / 2 {
                let [lo, hi] = T::unpack2(c.0[i]);
                o[2 * i] += cp * lo;
                o[2 * i + 1] += cp * hi;
            }
        }
        if last {
            let packed = Chunk(core::array::from_fn(|i| T::pack2(o[2 * i], o[2 * i + 1])));
            unsafe { *((p.out as *mut u16).add(at) as *mut Chunk) = packed };
        } else {
            let dst = unsafe { (p.acc as *mut f32).add(at) as *mut Chunk };
            unsafe {
                *dst = Chunk(core::array::from_fn(|i| o[i].to_bits()));
                *dst.add(1) = Chunk(core::array::from_fn(|i| o[4 + i].to_bits()));
            }
        }
    }
    if thread_idx_x() % 32 == 0 {
        let lse = lse::merged(base, sum);
        if !last {
            unsafe { *(p.acc_lse as *mut f32).add(lse_at) = lse };
        } else if p.out_lse != 0 {
            unsafe { *(p.out_lse as *mut f32).add(lse_at) = lse };
        }
    }
}

/// Declares the merge entry points (f16, bf16) with their markers.
macro_rules! merge_kernels {
    ($($name:ident, $t:ty;)*) => {$(
        /// The merge kernel (see the module docs and [`MergeParams`]); `MERGE_THREADS` threads
        /// per CTA, `MergeParams::grid` CTAs.
        #[cfg(feature = "entries")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: MergeParams) {
            unsafe {
                core::arch::asm!("// flashrs-kernel: merge {t}", t = const <$t as Element>::DTYPE.code(),
                    options(nomem, nostack, preserves_flags));
                merge::<$t>(&p)
            }
        }
    )*};
}

merge_kernels! {
    flash_merge_f16, F16;
    flash_merge_bf16, Bf16;
}
