//! Attention modifications of a call ([`Mods`]): a sliding window, a softcap on the scores,
//! ALiBi biases and learnable sinks, alone or together, with the semantics of the CPU
//! reference (`flashrs-reference`'s `Variants`):
//!
//! * **window** `(left, right)`, as FlashAttention's `window_size` (`None` for an unbounded
//!   side): query row `i` sees key `j` when `diag - left <= j <= diag + right`, where `diag = i +
//!   seqlen_k - seqlen_q` is its bottom-right-aligned diagonal. Causal masking caps `right` at
//!   0. Key tiles outside every row's window are never read, so a call's time follows the
//!   window, not the sequence.
//! * **softcap** `cap`: each scaled score `s` becomes `cap * tanh(s / cap)` (Gemma 2).
//! * **ALiBi**: `-slope * |diag - j|` added to the (capped) scaled score, one f32 slope per query
//!   head or per (batch entry, query head) (BLOOM, MPT). Unlike FlashAttention-2 under causal
//!   masking, which adds `slope * j` (the same softmax, a log-sum-exp `slope * diag` higher),
//!   the log-sum-exp is that of these scores.
//! * **sinks**: one f32 logit per query head that joins every row's softmax denominator
//!   (gpt-oss): a row's probabilities sum to less than 1, its log-sum-exp includes the sink,
//!   and a row that sees no key has output 0 and log-sum-exp the sink's logit.
//! * **block sparsity** ([`crate::sparse`]): a block mask in FlexAttention's form chooses the
//!   key blocks of 128 keys each query block of 128 rows computes; the masks above still
//!   apply inside them.
//! * **user data** ([`crate::custom`]): f32 data on the GPU that the caller's own modification
//!   kernels read (a learned bias table, per-head parameters), through
//!   [`crate::Gpu::attention_forward_custom`].
//!
//! Calls with modifications run on their own kernels (the plain ones compile none of this in):
//! on sm_90a the Hopper kernels, elsewhere `mma.sync`; fixed-length or variable-length, K and V
//! as tensors (not paged caches), one CTA per query block (no split-KV, no GQA packing). The
//! backward pass takes sliding windows, softcap and ALiBi (on `mma.sync` modification kernels),
//! block masks (on block-sparse twins of those, or alone on sm_90a of the Hopper kernel) and sinks (the forward's log-sum-exp already counts
//! them; the dQ kernel writes their gradient, [`crate::GradBuffers::dsinks`]).
use flashrs_abi::ModParams;
use flashrs_abi::params::WINDOW_UNBOUNDED;

use crate::layout::{DeviceArray, DeviceIndex};
use crate::sparse::BlockMask;

/// A sliding window: the keys before (`left`) and after (`right`) its diagonal a query row
/// sees; `None` bounds nothing on that side. [`Window::default`] is no window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Keys before the diagonal.
    pub left: Option<usize>,
    /// Keys after the diagonal (causal masking makes this 0).
    pub right: Option<usize>,
}

/// ALiBi slopes on the GPU: f32 `[heads_q]`, or `[batch, heads_q]` with `per_batch`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alibi<'a> {
    /// The slopes, in units of the scaled scores.
    pub slopes: DeviceArray<'a, f32>,
    /// One slope per (batch entry, query head) rather than per query head.
    pub per_batch: bool,
}

/// The attention modifications of a call (see the module docs); [`Mods::default`] is plain
/// attention. Set through [`crate::AttentionParamsBuilder`]'s `window`, `softcap`, `alibi`
/// and `sinks`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mods<'a> {
    /// Sliding window.
    pub window: Window,
    /// Softcap on the scaled scores: finite and positive.
    pub softcap: Option<f32>,
    /// ALiBi slopes.
    pub alibi: Option<Alibi<'a>>,
    /// Sink logits, f32 `[heads_q]`, in units of the scaled scores.
    pub sinks: Option<DeviceArray<'a, f32>>,
    /// Block sparsity: the key blocks each query block computes (see [`crate::sparse`]).
    pub blocks: Option<BlockMask<'a>>,
    /// Data the caller's own modification kernels read ([`crate::custom`]): a call with it
    /// launches only on them. The shipped kernels have no use for it.
    pub user: Option<DeviceArray<'a, f32>>,
}

impl<'a> Mods<'a> {
    /// True for plain attention: nothing set.
    pub fn is_plain(&self) -> bool {
        *self == Mods::default()
    }

    /// The f32 arrays a launch reads: ALiBi slopes, sinks, the user data.
    pub fn device_arrays(&self) -> impl Iterator<Item = DeviceArray<'a, f32>> {
        [self.alibi.map(|a| a.slopes), self.sinks, self.user].into_iter().flatten()
    }

    /// The i32 arrays a launch reads: a block mask's.
    pub fn device_indices(&self) -> impl Iterator<Item = DeviceIndex<'a>> {
        let full = self.blocks.and_then(|b| b.full).map(|(c, i)| [c, i]);
        self.blocks.map(|b| [b.counts, b.indices]).into_iter().chain(full).flatten()
    }

    /// What the kernels take, for a call of query heads `heads_q` whose scores are scaled by
    /// `scale` (see [`ModParams`]); causal masking folded into the window's right side.
    pub(crate) fn params(&self, causal: bool, scale: f32, heads_q: usize) -> ModParams {
        let side = |w: Option<usize>| w.map_or(WINDOW_UNBOUNDED, |x| x.min(WINDOW_UNBOUNDED as usize) as i32);
        let (softcap_pre, softcap_post) = self.softcap.map_or((0.0, 0.0), |cap| (2.0 * std::f32::consts::LOG2_E * scale / cap, cap / scale));
        ModParams {
            alibi: self.alibi.map_or(0, |a| a.slopes.buffer().ptr),
            sinks: self.sinks.map_or(0, |s| s.buffer().ptr),
            window_left: side(self.window.left),
            window_right: if causal { 0 } else { side(self.window.right) },
            softcap_pre,
            softcap_post,
            alibi_scale: 1.0 / scale,
            alibi_batch_stride: if self.alibi.is_some_and(|a| a.per_batch) { heads_q as u32 } else { 0 },
            blocks: self.blocks.map_or(flashrs_abi::BlockSparse::NONE, |b| b.params()),
            user: self.user.map_or(0, |u| u.buffer().ptr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_is_the_default_and_params_fold_the_scale_and_causal() {
        assert!(Mods::default().is_plain());
        let slopes = unsafe { DeviceArray::<f32>::from_raw(0x1000, 8) };
        let m = Mods { window: Window { left: Some(3), right: None }, softcap: Some(2.0), alibi: Some(Alibi { slopes, per_batch: true }), sinks: None, blocks: None, user: None };
        assert!(!m.is_plain());
        let p = m.params(false, 0.5, 8);
        assert_eq!((p.window_left, p.window_right, p.alibi, p.sinks, p.alibi_batch_stride), (3, WINDOW_UNBOUNDED, 0x1000, 0, 8));
        assert_eq!((p.softcap_pre, p.softcap_post, p.alibi_scale), (0.5 * std::f32::consts::LOG2_E, 4.0, 2.0));
        let causal = Mods { window: Window { left: None, right: Some(usize::MAX) }, ..Mods::default() }.params(true, 1.0, 1);
        assert_eq!((causal.window_left, causal.window_right, causal.softcap_pre), (WINDOW_UNBOUNDED, 0, 0.0));
        assert_eq!(Mods { window: Window { left: Some(usize::MAX), right: None }, ..m }.params(false, 1.0, 1).window_left, WINDOW_UNBOUNDED);
    }
}
