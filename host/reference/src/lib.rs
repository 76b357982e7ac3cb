//! CPU reference for forward attention, in f64: the independent check every kernel of
//! `flashrs` is tested against. It shares no code with the library: it is the textbook
//! definition, row by row, with the same semantics (bottom-right causal alignment, GQA head
//! mapping, `-inf` log-sum-exp for rows that see no key).

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
    /// Head dimension.
    pub head_dim: usize,
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
            causal: p.causal,
            scale: p.scale() as f64,
        }
    }
}

/// Inputs in contiguous `[batch, seqlen, heads, head_dim]` layout, as f32 (widened from the
/// 16-bit values the GPU saw, so both sides start from identical numbers).
pub struct RefInputs<'a> {
    /// Queries.
    pub q: &'a [f32],
    /// Keys.
    pub k: &'a [f32],
    /// Values.
    pub v: &'a [f32],
}

/// One query row's reference result.
#[derive(Clone, Debug, PartialEq)]
pub struct RefRow {
    /// Output row (`head_dim` values); zeros when the row sees no key.
    pub out: Vec<f64>,
    /// Natural-log log-sum-exp of the scaled, masked scores; `-inf` when the row sees no key.
    pub lse: f64,
}

/// Computes query row `row` of (`batch`, `head`).
pub fn reference_row(p: &Problem, x: &RefInputs, batch: usize, head: usize, row: usize) -> RefRow {
    let d = p.head_dim;
    let head_kv = head / (p.heads_q / p.heads_kv);
    let q_off = ((batch * p.seqlen_q + row) * p.heads_q + head) * d;
    let q = &x.q[q_off..q_off + d];
    let kv_off = |j: usize| ((batch * p.seqlen_k + j) * p.heads_kv + head_kv) * d;
    // Bottom-right aligned diagonal: row i sees keys j <= i + seqlen_k - seqlen_q.
    let visible = if p.causal {
        (row as i64 + p.seqlen_k as i64 - p.seqlen_q as i64 + 1).clamp(0, p.seqlen_k as i64) as usize
    } else {
        p.seqlen_k
    };
    if visible == 0 {
        return RefRow { out: vec![0.0; d], lse: f64::NEG_INFINITY };
    }
    let scale = p.scale;
    let scores: Vec<f64> = (0..visible)
        .map(|j| {
            let k = &x.k[kv_off(j)..kv_off(j) + d];
            scale * q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
        })
        .collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = weights.iter().sum();
    let mut out = vec![0.0; d];
    for (j, w) in weights.iter().enumerate() {
        let v = &x.v[kv_off(j)..kv_off(j) + d];
        for (o, &vv) in out.iter_mut().zip(v) {
            *o += w * vv as f64;
        }
    }
    out.iter_mut().for_each(|o| *o /= sum);
    RefRow { out, lse: max + sum.ln() }
}

/// The whole output (`[batch, seqlen_q, heads_q, head_dim]`) and log-sum-exp
/// (`[batch, heads_q, seqlen_q]`), computed on all available cores.
pub fn reference_forward(p: &Problem, x: &RefInputs) -> (Vec<f64>, Vec<f64>) {
    let rows: Vec<(usize, usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_q).flat_map(move |h| (0..p.seqlen_q).map(move |i| (b, h, i))))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(rows.len().max(1));
    let chunk = rows.len().div_ceil(threads).max(1);
    let results: Vec<Vec<RefRow>> = std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().map(|&(b, h, i)| reference_row(p, x, b, h, i)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().expect("reference thread panicked")).collect()
    });
    let d = p.head_dim;
    let mut out = vec![0.0; p.batch * p.seqlen_q * p.heads_q * d];
    let mut lse = vec![0.0; p.batch * p.heads_q * p.seqlen_q];
    for (&(b, h, i), r) in rows.iter().zip(results.iter().flatten()) {
        let o = ((b * p.seqlen_q + i) * p.heads_q + h) * d;
        out[o..o + d].copy_from_slice(&r.out);
        lse[(b * p.heads_q + h) * p.seqlen_q + i] = r.lse;
    }
    (out, lse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_key_returns_its_value_and_lse_is_the_score() {
        let p = Problem { batch: 1, seqlen_q: 1, seqlen_k: 1, heads_q: 1, heads_kv: 1, head_dim: 8, causal: false, scale: 0.5 };
        let q: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let k = vec![1.0f32; 8];
        let v: Vec<f32> = (0..8).map(|i| -(i as f32)).collect();
        let r = reference_row(&p, &RefInputs { q: &q, k: &k, v: &v }, 0, 0, 0);
        assert_eq!(r.out, v.iter().map(|&x| x as f64).collect::<Vec<_>>());
        assert!((r.lse - 0.5 * 28.0).abs() < 1e-12);
    }

    #[test]
    fn causal_bottom_right_alignment_and_empty_rows() {
        // seqlen_q = 3 > seqlen_k = 2: row 0 sees no key, row 1 sees key 0, row 2 both.
        let p = Problem { batch: 1, seqlen_q: 3, seqlen_k: 2, heads_q: 1, heads_kv: 1, head_dim: 8, causal: true, scale: 1.0 };
        let q = vec![0.0f32; 24];
        let k = vec![0.0f32; 16];
        let v: Vec<f32> = (0..16).map(|i| (i / 8) as f32 * 2.0 + 1.0).collect();
        let x = RefInputs { q: &q, k: &k, v: &v };
        let r0 = reference_row(&p, &x, 0, 0, 0);
        assert_eq!((r0.out[0], r0.lse), (0.0, f64::NEG_INFINITY));
        assert_eq!(reference_row(&p, &x, 0, 0, 1).out[0], 1.0);
        let r2 = reference_row(&p, &x, 0, 0, 2);
        assert!((r2.out[0] - 2.0).abs() < 1e-12 && (r2.lse - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn gqa_maps_query_heads_onto_shared_kv_heads() {
        // 4 query heads share 2 kv heads; kv head 1 holds V = 7.
        let p = Problem { batch: 1, seqlen_q: 1, seqlen_k: 1, heads_q: 4, heads_kv: 2, head_dim: 8, causal: false, scale: 1.0 };
        let q = vec![1.0f32; 32];
        let k = vec![1.0f32; 16];
        let v: Vec<f32> = (0..16).map(|i| if i < 8 { 3.0 } else { 7.0 }).collect();
        let (out, _) = reference_forward(&p, &RefInputs { q: &q, k: &k, v: &v });
        let per_head: Vec<f64> = (0..4).map(|h| out[h * 8]).collect();
        assert_eq!(per_head, vec![3.0, 3.0, 7.0, 7.0]);
    }
}
