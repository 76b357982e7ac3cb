//! CPU reference for attention, in f64: the independent check every kernel of `flashrs` is
//! tested against. It shares no code with the library: it is the textbook definition, row by
//! row, with the same semantics (bottom-right causal alignment, GQA head mapping, `-inf`
//! log-sum-exp and zero output for rows that see no key): the forward pass ([`reference_forward`])
//! and its analytic gradients ([`reference_backward`]), and both with the variants today's
//! models use ([`Variants`]: sliding window, softcap, ALiBi, sinks; the `_with` functions).

mod backward;
mod forward;
mod variants;

pub use backward::{RefGrads, reference_backward, reference_backward_with};
pub use forward::{RefRow, reference_forward, reference_forward_with, reference_row, reference_row_with};
pub use variants::{BLOCK, Bias, Blocks, Variants};

/// The attention problem: contiguous `[batch, seqlen, heads, head_dim]` tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    /// Batch size.
    pub batch: usize,
    /// Query rows per sequence.
    pub seqlen_q: usize,
    /// Key/value rows per sequence.
    pub seqlen_k: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads (`heads_q` a multiple of it).
    pub heads_kv: usize,
    /// Head dimension of Q and K.
    pub head_dim: usize,
    /// Head dimension of V and the output.
    pub head_dim_v: usize,
    /// Causal masking, aligned to the bottom-right corner: row `i` sees keys `j <= i + seqlen_k
    /// - seqlen_q`.
    pub causal: bool,
    /// Scale of `Q K^T`.
    pub scale: f64,
}

/// The problem of a library call (its shape, masking and scale; the reference reads contiguous
/// tensors whatever the call's strides).
#[cfg(feature = "flashrs")]
impl From<&flashrs::AttentionParams<'_>> for Problem {
    fn from(p: &flashrs::AttentionParams<'_>) -> Self {
        Problem {
            batch: p.batch,
            seqlen_q: p.seqlen_q,
            seqlen_k: p.seqlen_k,
            heads_q: p.heads_q,
            heads_kv: p.heads_kv,
            head_dim: p.head_dim,
            head_dim_v: p.head_dim_v(),
            causal: p.causal,
            scale: p.scale() as f64,
        }
    }
}

impl Problem {
    /// Keys query row `row` sees: all of them, or under causal masking those up to the
    /// bottom-right aligned diagonal (`j <= row + seqlen_k - seqlen_q`), possibly none.
    pub fn visible_keys(&self, row: usize) -> usize {
        if self.causal {
            (row as i64 + self.seqlen_k as i64 - self.seqlen_q as i64 + 1).clamp(0, self.seqlen_k as i64) as usize
        } else {
            self.seqlen_k
        }
    }

    /// The key/value head query head `head` reads.
    fn kv_head(&self, head: usize) -> usize {
        head / (self.heads_q / self.heads_kv)
    }

    /// Offset of query row `row` of (`batch`, `head`) in a tensor of `d` columns (Q's
    /// `head_dim`, the output's `head_dim_v`).
    fn q_offset(&self, batch: usize, head: usize, row: usize, d: usize) -> usize {
        ((batch * self.seqlen_q + row) * self.heads_q + head) * d
    }

    /// Offset of key/value row `row` of (`batch`, `head_kv`) in a tensor of `d` columns (K's
    /// `head_dim`, V's `head_dim_v`).
    fn kv_offset(&self, batch: usize, head_kv: usize, row: usize, d: usize) -> usize {
        ((batch * self.seqlen_k + row) * self.heads_kv + head_kv) * d
    }
}

/// Inputs in contiguous `[batch, seqlen, heads, head_dim]` layout: f32 as the GPU's 16-bit values
/// widen to (so both sides start from identical numbers), or f64 (for finite differences).
pub struct RefInputs<'a, T = f32> {
    /// Queries.
    pub q: &'a [T],
    /// Keys.
    pub k: &'a [T],
    /// Values.
    pub v: &'a [T],
}

/// `f` of every item, computed on all available cores, in order.
fn parallel_map<I: Sync, R: Send>(items: &[I], f: impl Fn(&I) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len().max(1));
    let chunk = items.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = items.chunks(chunk).map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<R>>())).collect();
        handles.into_iter().flat_map(|h| h.join().expect("reference thread panicked")).collect()
    })
}
