//! The dequantization factors of FP8 tensors ([`Descales`]): K's, V's and Q's stored 8-bit
//! values times them are K, V and Q, as FlashAttention-3's `k_descale` / `v_descale` /
//! `q_descale`.
//!
//! A factor is one f32 for the whole tensor, or one per K/V head (`[heads_kv]`) or per
//! (sequence, K/V head) (`[batch, heads_kv]`) on the GPU (Q's too are indexed by K/V head, as
//! FA3's). The kernels fold K's and Q's into the softmax scale and V's into the output, so
//! factors cost nothing per element.
use flashrs_abi::Descales as Params;

use crate::error::{Error, Result};
use crate::layout::DeviceArray;

/// One tensor's factor (see the module docs); [`Descale::default`] is 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Descale<'a> {
    /// One factor for every element: finite.
    Scalar(f32),
    /// f32 factors on the GPU: `[heads_kv]`, or `[batch, heads_kv]` with `per_batch`. Read
    /// unchecked by the kernels: each should be finite.
    Device {
        /// The factors.
        factors: DeviceArray<'a, f32>,
        /// One factor per (sequence, K/V head) rather than per K/V head.
        per_batch: bool,
    },
}

impl Default for Descale<'_> {
    fn default() -> Self {
        Descale::Scalar(1.0)
    }
}

/// The factors of K, V and Q; [`Descales::default`] is none (all 1). Set through
/// [`crate::AttentionParamsBuilder::kv_descale`] and [`crate::AttentionParamsBuilder::q_descale`];
/// only calls whose K and V (for `q`: Q) are FP8 ([`crate::Buffers::kv`],
/// [`crate::Buffers::fp8_queries`], [`crate::KvElement`], [`crate::QueryElement`]) take any other.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Descales<'a> {
    /// K's factor.
    pub k: Descale<'a>,
    /// V's factor.
    pub v: Descale<'a>,
    /// Q's factor.
    pub q: Descale<'a>,
}

impl<'a> Descales<'a> {
    /// True when no tensor is scaled.
    pub fn is_none(&self) -> bool {
        *self == Descales::default()
    }

    /// True when K and V are not scaled.
    pub fn kv_is_none(&self) -> bool {
        self.k == Descale::default() && self.v == Descale::default()
    }

    fn named(&self) -> [(&'static str, Descale<'a>); 3] {
        [("k_descale", self.k), ("v_descale", self.v), ("q_descale", self.q)]
    }

    /// The device arrays a launch reads.
    pub fn device_arrays(&self) -> impl Iterator<Item = DeviceArray<'a, f32>> {
        self.named().into_iter().filter_map(|(_, d)| match d {
            Descale::Device { factors, .. } => Some(factors),
            Descale::Scalar(_) => None,
        })
    }

    /// Each device array with its name and the entries a launch of `batch` sequences and
    /// `heads_kv` heads reads of it.
    pub(crate) fn arrays(&self, batch: usize, heads_kv: usize) -> Result<Vec<(&'static str, DeviceArray<'a, f32>, usize)>> {
        let mut out = vec![];
        for (name, d) in self.named() {
            if let Descale::Device { factors, per_batch } = d {
                let n = if per_batch { batch.checked_mul(heads_kv) } else { Some(heads_kv) };
                let n = n.ok_or_else(|| Error::InvalidShape { what: name, reason: "entries overflow".into() })?;
                out.push((name, factors, n));
            }
        }
        Ok(out)
    }

    /// Checks the scalars: finite (the arrays are checked with the buffers).
    pub(crate) fn check(&self) -> Result<()> {
        for (name, d) in self.named() {
            if let Descale::Scalar(x) = d
                && !x.is_finite()
            {
                return Err(Error::InvalidShape { what: name, reason: format!("{x} is not finite") });
            }
        }
        Ok(())
    }

    /// What the kernels take, for a call of `heads_kv` K/V heads.
    pub(crate) fn params(&self, heads_kv: usize) -> Params {
        let one = |d: Descale| match d {
            Descale::Scalar(x) => (0, x, 0),
            Descale::Device { factors, per_batch } => (factors.buffer().ptr, 1.0, if per_batch { heads_kv as u32 } else { 0 }),
        };
        let [k, v, q] = self.named().map(|(_, d)| one(d));
        Params { ptrs: [k.0, v.0, q.0], scale: [k.1, v.1, q.1], batch_strides: [k.2, v.2, q.2] }
    }
}
