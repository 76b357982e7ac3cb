//! The backward pass: the gradients of a loss with respect to Q, K and V, given its gradient
//! with respect to the output (`dout`), analytically:
//!
//! `P = softmax(S)` over each row's visible keys (and its sink), `S = f(scale * Q K^T)` with
//! `f` the variants' score ([`crate::Variants::score`]), `O = P V`, and with `D_i = dO_i . O_i`:
//! `dV_j = sum_i P_ij dO_i`, `dS_ij = P_ij (dO_i . V_j - D_i) f'_ij`, `dQ_i = scale * sum_j dS_ij
//! K_j`, `dK_j = scale * sum_i dS_ij Q_i`, and a sink's `d sink = - sum_i P_sink,i D_i` over its
//! head's rows. With GQA, a K/V head's gradients sum over the query heads that read it. Rows
//! that see no key contribute nothing and get a zero `dQ`. The forward is recomputed here in
//! f64, not taken from a kernel.
use crate::forward::{softmax, weighted_values};
use crate::{Problem, RefInputs, Variants, parallel_map};

/// Reference gradients, in the inputs' layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct RefGrads {
    /// `[batch, seqlen_q, heads_q, head_dim]`.
    pub dq: Vec<f64>,
    /// `[batch, seqlen_k, heads_kv, head_dim]`.
    pub dk: Vec<f64>,
    /// `[batch, seqlen_k, heads_kv, head_dim_v]`.
    pub dv: Vec<f64>,
    /// `[heads_q]`: the sinks' gradients (empty without sinks).
    pub dsinks: Vec<f64>,
}

/// The gradients of a loss whose gradient with respect to the output is `dout` (contiguous
/// `[batch, seqlen_q, heads_q, head_dim_v]`), computed on all available cores.
pub fn reference_backward<T: Copy + Into<f64> + Sync>(p: &Problem, x: &RefInputs<T>, dout: &[T]) -> RefGrads {
    reference_backward_with(p, &Variants::NONE, x, dout)
}

/// [`reference_backward`] with variants.
pub fn reference_backward_with<T: Copy + Into<f64> + Sync>(p: &Problem, var: &Variants, x: &RefInputs<T>, dout: &[T]) -> RefGrads {
    let (d, dv_cols) = (p.head_dim, p.head_dim_v);
    let group = p.heads_q / p.heads_kv;
    // One task per (batch, K/V head): it owns that head's dK and dV, and its query heads' dQ
    // and sink gradients.
    let tasks: Vec<(usize, usize)> = (0..p.batch).flat_map(|b| (0..p.heads_kv).map(move |h| (b, h))).collect();
    let parts = parallel_map(&tasks, |&(b, hkv)| {
        let (mut dk, mut dv) = (vec![0.0; p.seqlen_k * d], vec![0.0; p.seqlen_k * dv_cols]);
        let mut dq = vec![0.0; group * p.seqlen_q * d];
        let mut dsinks = vec![0.0; group];
        for g in 0..group {
            let h = hkv * group + g;
            for i in 0..p.seqlen_q {
                let sm = softmax(p, var, x, b, h, i);
                if sm.probs.is_empty() {
                    continue;
                }
                let out = weighted_values(p, x, b, h, sm.keys.clone(), &sm.probs);
                let q = &x.q[p.q_offset(b, h, i, d)..][..d];
                let d_o = &dout[p.q_offset(b, h, i, dv_cols)..][..dv_cols];
                let big_d = d_o.iter().zip(&out).map(|(&a, b)| a.into() * b).sum::<f64>();
                dsinks[g] -= sm.sink * big_d;
                let dq_row = &mut dq[(g * p.seqlen_q + i) * d..][..d];
                for ((j, &pj), &f) in sm.keys.clone().zip(&sm.probs).zip(&sm.dscore) {
                    let (k, v) = (&x.k[p.kv_offset(b, hkv, j, d)..][..d], &x.v[p.kv_offset(b, hkv, j, dv_cols)..][..dv_cols]);
                    let dp = d_o.iter().zip(v).map(|(&a, &b)| a.into() * b.into()).sum::<f64>();
                    let ds = pj * (dp - big_d) * f;
                    for c in 0..d {
                        dq_row[c] += p.scale * ds * k[c].into();
                        dk[j * d + c] += p.scale * ds * q[c].into();
                    }
                    for c in 0..dv_cols {
                        dv[j * dv_cols + c] += pj * d_o[c].into();
                    }
                }
            }
        }
        (dq, dk, dv, dsinks)
    });
    let mut grads = RefGrads {
        dq: vec![0.0; p.batch * p.seqlen_q * p.heads_q * d],
        dk: vec![0.0; p.batch * p.seqlen_k * p.heads_kv * d],
        dv: vec![0.0; p.batch * p.seqlen_k * p.heads_kv * dv_cols],
        dsinks: if var.sinks.is_some() { vec![0.0; p.heads_q] } else { vec![] },
    };
    for (&(b, hkv), (dq, dk, dv, dsinks)) in tasks.iter().zip(parts) {
        for g in 0..group {
            for i in 0..p.seqlen_q {
                grads.dq[p.q_offset(b, hkv * group + g, i, d)..][..d].copy_from_slice(&dq[(g * p.seqlen_q + i) * d..][..d]);
            }
            if let Some(s) = grads.dsinks.get_mut(hkv * group + g) {
                *s += dsinks[g];
            }
        }
        for j in 0..p.seqlen_k {
            grads.dk[p.kv_offset(b, hkv, j, d)..][..d].copy_from_slice(&dk[j * d..][..d]);
            grads.dv[p.kv_offset(b, hkv, j, dv_cols)..][..dv_cols].copy_from_slice(&dv[j * dv_cols..][..dv_cols]);
        }
    }
    grads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference_forward;

    /// Deterministic values in (-1.5, 1.5), different per salt.
    fn values(n: usize, salt: u64) -> Vec<f64> {
        let mut s = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 53) as f64 * 3.0 - 1.5
            })
            .collect()
    }

    /// `sum(dout * O)`, whose gradients are the backward's for that `dout`.
    fn loss(p: &Problem, q: &[f64], k: &[f64], v: &[f64], dout: &[f64]) -> f64 {
        let (out, _) = reference_forward(p, &RefInputs { q, k, v });
        out.iter().zip(dout).map(|(o, g)| o * g).sum()
    }

    /// The analytic gradients against central finite differences of the loss, element by
    /// element, on tiny shapes: GQA, causal with more queries than keys (rows without keys),
    /// and with fewer, and V's head dimension other than K's (wider and narrower).
    #[test]
    fn gradients_match_finite_differences() {
        for (sq, sk, causal, dv) in [(3, 5, false, 3), (5, 3, true, 3), (4, 6, true, 3), (4, 5, true, 5), (3, 4, false, 2)] {
            let p = Problem { batch: 2, seqlen_q: sq, seqlen_k: sk, heads_q: 4, heads_kv: 2, head_dim: 3, head_dim_v: dv, causal, scale: 0.7 };
            let (nq, nk, nv, no) = (2 * sq * 4 * 3, 2 * sk * 2 * 3, 2 * sk * 2 * dv, 2 * sq * 4 * dv);
            let (q, k, v, dout) = (values(nq, 1), values(nk, 2), values(nv, 3), values(no, 4));
            let g = reference_backward(&p, &RefInputs { q: &q, k: &k, v: &v }, &dout);
            assert!(g.dq.iter().chain(&g.dk).chain(&g.dv).any(|x| x.abs() > 1e-2), "all gradients near zero: the check would compare nothing");
            let h = 1e-6;
            for (which, analytic) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
                for e in 0..analytic.len() {
                    let mut t = [q.clone(), k.clone(), v.clone()];
                    t[which][e] += h;
                    let up = loss(&p, &t[0], &t[1], &t[2], &dout);
                    t[which][e] -= 2.0 * h;
                    let down = loss(&p, &t[0], &t[1], &t[2], &dout);
                    let numeric = (up - down) / (2.0 * h);
                    let err = (numeric - analytic[e]).abs();
                    assert!(err < 1e-7 + 1e-6 * numeric.abs(), "tensor {which} element {e}: analytic {} numeric {numeric} ({sq}x{sk} causal {causal})", analytic[e]);
                }
            }
        }
    }

    /// `sum(dout * O)` under variants `var` with the sink logits `sinks`.
    fn loss_with(p: &Problem, var: &Variants, sinks: &[f64], q: &[f64], k: &[f64], v: &[f64], dout: &[f64]) -> f64 {
        let var = Variants { sinks: var.sinks.map(|_| sinks), ..*var };
        let (out, _) = crate::reference_forward_with(p, &var, &RefInputs { q, k, v });
        out.iter().zip(dout).map(|(o, g)| o * g).sum()
    }

    /// With each variant and all of them together: the analytic gradients (and the sinks')
    /// against central finite differences, element by element.
    #[test]
    fn variant_gradients_match_finite_differences() {
        let slopes = [0.3, 0.05, 0.6, 0.2];
        let per_batch = [0.3, 0.05, 0.6, 0.2, 0.1, 0.4, 0.0, 0.25];
        let sinks = [0.4, -1.0, 2.0, 0.0];
        let cases = [
            (false, Variants { window: (Some(2), Some(1)), ..Variants::NONE }),
            (true, Variants { window: (Some(1), None), ..Variants::NONE }),
            (false, Variants { softcap: Some(0.8), ..Variants::NONE }),
            (true, Variants { alibi: Some(&slopes), ..Variants::NONE }),
            (false, Variants { alibi: Some(&per_batch), ..Variants::NONE }),
            (true, Variants { sinks: Some(&sinks), ..Variants::NONE }),
            (false, Variants { window: (Some(1), Some(2)), softcap: Some(1.5), alibi: Some(&slopes), sinks: Some(&sinks), blocks: None, bias: None }),
        ];
        for (causal, var) in cases {
            // More queries than keys: under causal masking and narrow windows some rows see none.
            let p = Problem { batch: 2, seqlen_q: 5, seqlen_k: 4, heads_q: 4, heads_kv: 2, head_dim: 3, head_dim_v: 3, causal, scale: 0.9 };
            let (nq, nk) = (2 * 5 * 4 * 3, 2 * 4 * 2 * 3);
            let (q, k, v, dout) = (values(nq, 11), values(nk, 12), values(nk, 13), values(nq, 14));
            let g = reference_backward_with(&p, &var, &RefInputs { q: &q, k: &k, v: &v }, &dout);
            assert!(g.dq.iter().chain(&g.dk).chain(&g.dv).any(|x| x.abs() > 1e-2), "{var:?}: all gradients near zero");
            assert_eq!(g.dsinks.len(), if var.sinks.is_some() { 4 } else { 0 });
            let h = 1e-6;
            let s0 = var.sinks.map_or(vec![], |s| s.to_vec());
            for (which, analytic) in [(0, &g.dq), (1, &g.dk), (2, &g.dv), (3, &g.dsinks)] {
                for e in 0..analytic.len() {
                    let mut t = [q.clone(), k.clone(), v.clone(), s0.clone()];
                    t[which][e] += h;
                    let up = loss_with(&p, &var, &t[3], &t[0], &t[1], &t[2], &dout);
                    t[which][e] -= 2.0 * h;
                    let down = loss_with(&p, &var, &t[3], &t[0], &t[1], &t[2], &dout);
                    let numeric = (up - down) / (2.0 * h);
                    let err = (numeric - analytic[e]).abs();
                    assert!(err < 1e-7 + 1e-6 * numeric.abs(), "{var:?} causal {causal}: tensor {which} element {e}: analytic {} numeric {numeric}", analytic[e]);
                }
            }
        }
    }

    /// A row that sees no key has no gradient, and its keys get none from it.
    #[test]
    fn rows_without_keys_have_zero_gradient() {
        // Causal, 3 queries over 1 key: rows 0 and 1 see nothing, row 2 sees key 0.
        let p = Problem { batch: 1, seqlen_q: 3, seqlen_k: 1, heads_q: 1, heads_kv: 1, head_dim: 2, head_dim_v: 2, causal: true, scale: 1.0 };
        let (q, k, v) = (values(6, 5), values(2, 6), values(2, 7));
        let dout = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0];
        let g = reference_backward(&p, &RefInputs { q: &q, k: &k, v: &v }, &dout);
        assert_eq!(&g.dq[..4], &[0.0; 4]);
        // Only row 2 reaches the key, with weight 1 and a zero dout: nothing flows back.
        assert_eq!((g.dk.clone(), g.dv.clone()), (vec![0.0; 2], vec![0.0; 2]));
    }
}
