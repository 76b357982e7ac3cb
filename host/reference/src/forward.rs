//! The forward pass: each query row's output and log-sum-exp.
use crate::{Problem, RefInputs, Variants, parallel_map};
use core::ops::Range;

/// One query row's reference result.
#[derive(Clone, Debug, PartialEq)]
pub struct RefRow {
    /// Output row (`head_dim_v` values); zeros when the row sees no key.
    pub out: Vec<f64>,
    /// Natural-log log-sum-exp of the scaled, masked scores; `-inf` when the row sees no key.
    pub lse: f64,
}

/// A query row's softmax over the keys it sees.
pub(crate) struct RowSoftmax {
    /// The keys it sees.
    pub keys: Range<usize>,
    /// Their probabilities (empty when it sees none).
    pub probs: Vec<f64>,
    /// Each score's derivative with respect to its scaled dot product (the softcap's).
    pub dscore: Vec<f64>,
    /// The sink's probability (0 without sinks).
    pub sink: f64,
    /// Natural-log log-sum-exp of the scores (and the sink): `-inf` with neither.
    pub lse: f64,
}

/// The softmax of query row `row` of (`batch`, `head`).
pub(crate) fn softmax<T: Copy + Into<f64>>(p: &Problem, var: &Variants, x: &RefInputs<T>, batch: usize, head: usize, row: usize) -> RowSoftmax {
    let d = p.head_dim;
    let q = &x.q[p.q_offset(batch, head, row, d)..][..d];
    let head_kv = p.kv_head(head);
    let keys = var.visible(p, row);
    // Keys in blocks the block mask skips score -inf (probability 0, no gradient).
    let (scores, dscore): (Vec<f64>, Vec<f64>) = keys
        .clone()
        .map(|j| {
            if !var.block_visits(batch, head, row, j) {
                return (f64::NEG_INFINITY, 0.0);
            }
            let k = &x.k[p.kv_offset(batch, head_kv, j, d)..][..d];
            var.score(p, batch, head, row, j, p.scale * q.iter().zip(k).map(|(&a, &b)| a.into() * b.into()).sum::<f64>())
        })
        .unzip();
    let sink = var.sink(head);
    if scores.iter().all(|&s| s == f64::NEG_INFINITY) && sink.is_none() {
        return RowSoftmax { probs: vec![0.0; keys.len()], keys, dscore, sink: 0.0, lse: f64::NEG_INFINITY };
    }
    // A NaN score (NaN in Q or K) makes the row's results NaN, as it does the kernels'.
    let max = scores.iter().cloned().chain(sink).fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sink_weight = sink.map_or(0.0, |s| (s - max).exp());
    let sum: f64 = weights.iter().sum::<f64>() + sink_weight;
    RowSoftmax { keys, probs: weights.iter().map(|w| w / sum).collect(), dscore, sink: sink_weight / sum, lse: max + sum.ln() }
}

/// `sum_j probs[j] * v_j` over `keys` of (`batch`, `head`)'s K/V head.
pub(crate) fn weighted_values<T: Copy + Into<f64>>(p: &Problem, x: &RefInputs<T>, batch: usize, head: usize, keys: Range<usize>, probs: &[f64]) -> Vec<f64> {
    let (d, head_kv) = (p.head_dim_v, p.kv_head(head));
    let mut out = vec![0.0; d];
    for (j, w) in keys.zip(probs) {
        for (o, &vv) in out.iter_mut().zip(&x.v[p.kv_offset(batch, head_kv, j, d)..][..d]) {
            *o += w * vv.into();
        }
    }
    out
}

/// Computes query row `row` of (`batch`, `head`).
pub fn reference_row<T: Copy + Into<f64>>(p: &Problem, x: &RefInputs<T>, batch: usize, head: usize, row: usize) -> RefRow {
    reference_row_with(p, &Variants::NONE, x, batch, head, row)
}

/// [`reference_row`] with variants.
pub fn reference_row_with<T: Copy + Into<f64>>(p: &Problem, var: &Variants, x: &RefInputs<T>, batch: usize, head: usize, row: usize) -> RefRow {
    let sm = softmax(p, var, x, batch, head, row);
    RefRow { out: weighted_values(p, x, batch, head, sm.keys, &sm.probs), lse: sm.lse }
}

/// The whole output (`[batch, seqlen_q, heads_q, head_dim_v]`) and log-sum-exp
/// (`[batch, heads_q, seqlen_q]`), computed on all available cores.
pub fn reference_forward<T: Copy + Into<f64> + Sync>(p: &Problem, x: &RefInputs<T>) -> (Vec<f64>, Vec<f64>) {
    reference_forward_with(p, &Variants::NONE, x)
}

/// [`reference_forward`] with variants.
pub fn reference_forward_with<T: Copy + Into<f64> + Sync>(p: &Problem, var: &Variants, x: &RefInputs<T>) -> (Vec<f64>, Vec<f64>) {
    let rows: Vec<(usize, usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_q).flat_map(move |h| (0..p.seqlen_q).map(move |i| (b, h, i))))
        .collect();
    let results = parallel_map(&rows, |&(b, h, i)| reference_row_with(p, var, x, b, h, i));
    let d = p.head_dim_v;
    let mut out = vec![0.0; p.batch * p.seqlen_q * p.heads_q * d];
    let mut lse = vec![0.0; p.batch * p.heads_q * p.seqlen_q];
    for (&(b, h, i), r) in rows.iter().zip(&results) {
        out[p.q_offset(b, h, i, d)..][..d].copy_from_slice(&r.out);
        lse[(b * p.heads_q + h) * p.seqlen_q + i] = r.lse;
    }
    (out, lse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_key_returns_its_value_and_lse_is_the_score() {
        let p = Problem { batch: 1, seqlen_q: 1, seqlen_k: 1, heads_q: 1, heads_kv: 1, head_dim: 8, head_dim_v: 8, causal: false, scale: 0.5 };
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
        let p = Problem { batch: 1, seqlen_q: 3, seqlen_k: 2, heads_q: 1, heads_kv: 1, head_dim: 8, head_dim_v: 8, causal: true, scale: 1.0 };
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
    fn a_nan_score_makes_its_row_nan_and_only_its_row() {
        let p = Problem { batch: 1, seqlen_q: 2, seqlen_k: 2, heads_q: 1, heads_kv: 1, head_dim: 2, head_dim_v: 2, causal: false, scale: 1.0 };
        let q = [f32::NAN, 0.0, 1.0, 0.0];
        let (k, v) = ([1.0f32; 4], [1.0f32; 4]);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let r0 = reference_row(&p, &x, 0, 0, 0);
        assert!(r0.lse.is_nan() && r0.out.iter().all(|o| o.is_nan()));
        let r1 = reference_row(&p, &x, 0, 0, 1);
        assert!((r1.lse - (1.0 + 2f64.ln())).abs() < 1e-12 && r1.out == [1.0, 1.0]);
    }

    #[test]
    fn gqa_maps_query_heads_onto_shared_kv_heads() {
        // 4 query heads share 2 kv heads; kv head 1 holds V = 7.
        let p = Problem { batch: 1, seqlen_q: 1, seqlen_k: 1, heads_q: 4, heads_kv: 2, head_dim: 8, head_dim_v: 8, causal: false, scale: 1.0 };
        let q = vec![1.0f32; 32];
        let k = vec![1.0f32; 16];
        let v: Vec<f32> = (0..16).map(|i| if i < 8 { 3.0 } else { 7.0 }).collect();
        let (out, _) = reference_forward(&p, &RefInputs { q: &q, k: &k, v: &v });
        let per_head: Vec<f64> = (0..4).map(|h| out[h * 8]).collect();
        assert_eq!(per_head, vec![3.0, 3.0, 7.0, 7.0]);
    }
}
