//! Forward attention with a learned relative-position bias, as a crate outside flashrs builds
//! it: a [`ScoreMod`] of its own, instantiated in `kernels-gpu`'s kernel bodies with its entry
//! macros. `cargo xtask build-ptx --crate host/examples/relative_bias_kernels` compiles it; the
//! `relative_bias` example loads the PTX with `Gpu::load_custom_kernels` and checks it against
//! the CPU reference.
//!
//! The bias is one learned value per query head and relative position `key - diag` (`diag =
//! row + seqlen_k - seqlen_q`, the row's bottom-right-aligned diagonal), as T5 and Swin learn
//! theirs; how positions share values (clamped, bucketed) is the host's business, which
//! spreads its table over every position. The user data ([`flashrs_abi::ModParams::user`]) is
//! f32 `[1 + heads_q * (2 r + 1)]`: the radius `r` (an integer, as f32), then each head's bias
//! for relative positions `-r..=r`, in units of the scaled scores. `r` must be at least the
//! longest sequence plus 256, because the kernels modify the scores of their tiles' padding
//! rows and keys too (masked afterwards): each tile checks, and traps where it is not (a
//! launch error, never a read outside the table). A lookup is then one load at a constant
//! offset from the tile's base, without a clamp per score: a clamped lookup spilled the Hopper
//! kernels, whose consumers have 168 registers.
//!
//! The bias goes on after the built-in modifications ([`Builtin`]: softcap, ALiBi, sinks), so
//! a call may combine them; the mask is the built-in sliding window (with causal masking). The
//! backward's main kernels take the same modification ([`ScoreMod::grad`]: the bias adds a
//! constant), so a training step runs through it too.
#![no_std]
#![feature(abi_ptx, asm_experimental_arch, stdarch_nvptx)]

use kernels_gpu::abi::FwdParams;
use kernels_gpu::abi::grid::Extent;
use kernels_gpu::dtype::{Bf16, F16};
use kernels_gpu::mods::{At, Builtin, ScoreMod, Window};

// The module's dynamic shared memory, which the kernel bodies address.
kernels_gpu::dynamic_shared_memory!();

/// The bias of one work tile's (batch entry, query head), on top of [`Builtin`].
#[derive(Clone, Copy)]
pub struct RelativeBias {
    builtin: Builtin,
    /// The head's table, at relative position 0.
    table: *const f32,
    /// `seqlen_k - seqlen_q`: the diagonal's offset.
    offset: i32,
    /// Scaled-score units to the kernels' raw ones: `1 / scale`.
    raw: f32,
}

impl ScoreMod for RelativeBias {
    const ACTIVE: bool = true;
    const SINK: bool = true;
    /// The built-in parts, then the bias.
    const PARTS: usize = Builtin::PARTS + 1;

    #[inline(always)]
    fn new(p: &FwdParams, batch: u32, head: u32, e: &Extent) -> Self {
        let data = p.mods.user as *const f32;
        let radius = unsafe { *data } as u32;
        // Tiles reach at most 192 rows past the sequence and 128 keys past its keys.
        if radius < e.seqlen_q.max(e.seqlen_k).saturating_add(256) {
            unsafe { core::arch::nvptx::trap() };
        }
        let table = unsafe { data.add(1 + (head as usize) * (2 * radius as usize + 1) + radius as usize) };
        let raw = core::f32::consts::LOG2_E / p.scale_log2;
        RelativeBias { builtin: Builtin::new(p, batch, head, e), table, offset: e.seqlen_k as i32 - e.seqlen_q as i32, raw }
    }

    #[inline(always)]
    fn score(&self, s: f32, at: At) -> f32 {
        (0..Self::PARTS).fold(s, |s, part| if self.part_on(part) { self.score_part(part, s, at) } else { s })
    }

    #[inline(always)]
    fn part_on(&self, part: usize) -> bool {
        part == Builtin::PARTS || self.builtin.part_on(part)
    }

    #[inline(always)]
    fn score_part(&self, part: usize, s: f32, at: At) -> f32 {
        if part < Builtin::PARTS {
            return self.builtin.score_part(part, s, at);
        }
        s + self.bias(at)
    }

    #[inline(always)]
    fn sink_log2(&self) -> f32 {
        self.builtin.sink_log2()
    }

    /// The bias adds a constant: the derivative is the built-in parts' (the softcap's
    /// `1 - tanh^2`), at the score before the bias.
    const GRAD: bool = Builtin::GRAD;

    #[inline(always)]
    fn grad_on(&self) -> bool {
        self.builtin.grad_on()
    }

    #[inline(always)]
    fn grad(&self, modified: f32, at: At) -> f32 {
        self.builtin.grad(modified - self.bias(at), at)
    }
}

impl RelativeBias {
    /// The bias of the score at `at`, in the kernels' raw units.
    #[inline(always)]
    fn bias(&self, at: At) -> f32 {
        let relative = at.key - at.row - self.offset;
        self.raw * unsafe { *self.table.offset(relative as isize) }
    }
}

// Head dimensions 64 and 128 of the modification kernels' `mma.sync` table (every GPU), both
// element types, fixed-length calls (a `Varlen` entry would serve variable-length ones).
kernels_gpu::mma_forward_kernel!(rel_bias_f16_d64, F16, Plain, Mods, 0, RelativeBias, Window);
kernels_gpu::mma_forward_kernel!(rel_bias_bf16_d64, Bf16, Plain, Mods, 0, RelativeBias, Window);
kernels_gpu::mma_forward_kernel!(rel_bias_f16_d128, F16, Plain, Mods, 1, RelativeBias, Window);
kernels_gpu::mma_forward_kernel!(rel_bias_bf16_d128, Bf16, Plain, Mods, 1, RelativeBias, Window);

// The backward's main kernels of the modification table (`BWD_MODS`), dQ in rows: head_dim 64
// (configuration 6) and 128 (8, and 7 for GPUs of 99 KB of shared memory per CTA).
kernels_gpu::mma_backward_kernel!(rel_bias_bwd_bf16_d64, Bf16, Mods, 6, false, RelativeBias, Window);
kernels_gpu::mma_backward_kernel!(rel_bias_bwd_f16_d128, F16, Mods, 8, false, RelativeBias, Window);
kernels_gpu::mma_backward_kernel!(rel_bias_bwd_bf16_d128, Bf16, Mods, 8, false, RelativeBias, Window);
kernels_gpu::mma_backward_kernel!(rel_bias_bwd_bf16_d128_s1, Bf16, Mods, 7, false, RelativeBias, Window);

// The Hopper forward kernels of the same head dimensions, and the backward's main kernels with
// dQ in fragment order, which the planner takes on sm_90a (sm_90a modules only).
#[cfg(target_feature = "sm_90a")]
mod hopper {
    use super::*;
    kernels_gpu::sm90_forward_kernel!(rel_bias_sm90_bf16_d64, Bf16, 3, false, Mods, RelativeBias, Window);
    kernels_gpu::sm90_forward_kernel!(rel_bias_sm90_f16_d128, F16, 1, false, Mods, RelativeBias, Window);
    kernels_gpu::sm90_forward_kernel!(rel_bias_sm90_bf16_d128, Bf16, 1, false, Mods, RelativeBias, Window);
    kernels_gpu::mma_backward_kernel!(rel_bias_bwd_frag_bf16_d64, Bf16, Mods, 6, true, RelativeBias, Window);
    kernels_gpu::mma_backward_kernel!(rel_bias_bwd_frag_f16_d128, F16, Mods, 8, true, RelativeBias, Window);
    kernels_gpu::mma_backward_kernel!(rel_bias_bwd_frag_bf16_d128, Bf16, Mods, 8, true, RelativeBias, Window);
}
