//! `--verify`: a kernel's output against the CPU reference, in full for small shapes and on a
//! spread of query rows otherwise, with the row's attention modifications ([`Variants`]:
//! [`Variants::NONE`] for plain rows).

use flashrs::DType;
use flashrs_reference::{Problem, RefInputs, Variants, reference_forward_with, reference_row_with};

/// Query rows compared when the shape is too large to check in full.
pub const SAMPLE_ROWS: usize = 64;
/// Shapes up to this many reference multiply-adds per product (rows * seqlen_k * head_dim for
/// `Q K^T`, the same with head_dim_v for `P V`: their mean) are checked in full: a second or so
/// of CPU time.
pub const FULL_CHECK_MACS: usize = 1 << 28;

/// Allowed error per element: `atol + rtol * |reference|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part: accumulated rounding of the 16-bit P matrix and the f32 sums.
    pub atol: f64,
    /// Relative part: one rounding of the output to the element type (its half ulp), which
    /// dominates when an output is large (short rows averaging few values).
    pub rtol: f64,
}

impl Tolerance {
    /// The tolerance for FP8 inputs with a 16-bit output: the kernels round P to E4M3 (3
    /// mantissa bits) for the FP8 `P V`, where the reference keeps it exact; relative part as
    /// for bf16.
    pub const FP8_INPUTS: Tolerance = Tolerance { atol: 8e-2, rtol: 8e-3 };

    /// The tolerance for outputs stored as `dtype`.
    pub fn for_dtype(dtype: DType) -> Self {
        match dtype {
            DType::Bf16 => Tolerance { atol: 1.5e-2, rtol: 8e-3 },
            _ => Tolerance { atol: 2e-3, rtol: 1e-3 },
        }
    }

    /// The tolerance at reference value `want`.
    fn allowed(&self, want: f64) -> f64 {
        self.atol + self.rtol * want.abs()
    }
}

/// A query row: (batch, head, row).
pub type RowIndex = (usize, usize, usize);

/// The element that broke its tolerance by the widest margin.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Its query row.
    pub row: RowIndex,
    /// Its column in the head dimension.
    pub col: usize,
    /// The kernel's value.
    pub got: f32,
    /// The reference value.
    pub want: f64,
    /// The tolerance there.
    pub allowed: f64,
}

/// What a check found.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Query rows compared.
    pub rows: usize,
    /// Largest absolute error (infinite if the kernel wrote NaN or infinity).
    pub max_abs_err: f64,
    /// The worst element over its tolerance, if any.
    pub mismatch: Option<Mismatch>,
}

impl Outcome {
    /// `Err` with a message naming the shape, kernel and element when anything is over tolerance.
    pub fn into_result(self, what: &str) -> Result<Self, String> {
        match &self.mismatch {
            None => Ok(self),
            Some(m) => Err(format!(
                "verification failed for {what}: out[batch {}, row {}, head {}, col {}] = {} but the reference is {:.6} \
                 (error {:.3e} > tolerance {:.3e}); max abs error {:.3e} over {} checked rows",
                m.row.0,
                m.row.2,
                m.row.1,
                m.col,
                m.got,
                m.want,
                (m.got as f64 - m.want).abs(),
                m.allowed,
                self.max_abs_err,
                self.rows
            )),
        }
    }
}

/// Up to `n` query rows spread evenly over (batch, head, row) order, always including the
/// first and the last.
pub fn sample_rows(p: &Problem, n: usize) -> Vec<RowIndex> {
    let total = p.batch * p.heads_q * p.seqlen_q;
    let n = n.min(total);
    let unflatten = |f: usize| (f / (p.heads_q * p.seqlen_q), f / p.seqlen_q % p.heads_q, f % p.seqlen_q);
    match n {
        0 => Vec::new(),
        1 => vec![unflatten(0)],
        _ => (0..n).map(|k| unflatten(k * (total - 1) / (n - 1))).collect(),
    }
}

/// Compares `out` (contiguous `[batch, seqlen_q, heads_q, head_dim_v]`) with the reference
/// computed from `x` with the modifications `var`: every row if the shape is small, else
/// [`SAMPLE_ROWS`] of them.
pub fn check(p: &Problem, var: &Variants, x: &RefInputs, out: &[f32], tol: Tolerance) -> Outcome {
    let d = p.head_dim_v;
    let offset = |(b, h, i): RowIndex| ((b * p.seqlen_q + i) * p.heads_q + h) * d;
    let rows = p.batch * p.heads_q * p.seqlen_q;
    if rows * p.seqlen_k * (p.head_dim + p.head_dim_v) <= 2 * FULL_CHECK_MACS {
        let (reference, _) = reference_forward_with(p, var, x);
        let all = sample_rows(p, rows);
        compare(out, all.iter().map(|&r| (r, &reference[offset(r)..offset(r) + d])), offset, tol)
    } else {
        let sampled: Vec<(RowIndex, Vec<f64>)> =
            sample_rows(p, SAMPLE_ROWS).into_iter().map(|r @ (b, h, i)| (r, reference_row_with(p, var, x, b, h, i).out)).collect();
        compare(out, sampled.iter().map(|(r, v)| (*r, v.as_slice())), offset, tol)
    }
}

/// Compares the given reference rows with `out`, whose row `r` starts at `offset(r)`.
fn compare<'a>(
    out: &[f32],
    rows: impl Iterator<Item = (RowIndex, &'a [f64])>,
    offset: impl Fn(RowIndex) -> usize,
    tol: Tolerance,
) -> Outcome {
    let mut outcome = Outcome { rows: 0, max_abs_err: 0.0, mismatch: None };
    // How far past its tolerance the worst element is (NaN counts as infinitely far).
    let mut worst_excess = 1.0;
    for (row, want) in rows {
        outcome.rows += 1;
        let got = &out[offset(row)..offset(row) + want.len()];
        for (col, (&g, &w)) in got.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs();
            let err = if err.is_nan() { f64::INFINITY } else { err };
            outcome.max_abs_err = outcome.max_abs_err.max(err);
            let allowed = tol.allowed(w);
            if err / allowed > worst_excess {
                worst_excess = err / allowed;
                outcome.mismatch = Some(Mismatch { row, col, got: g, want: w, allowed });
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs_reference::reference_forward;

    fn problem(batch: usize, seqlen_q: usize, seqlen_k: usize, heads_q: usize, head_dim: usize) -> Problem {
        Problem { batch, seqlen_q, seqlen_k, heads_q, heads_kv: heads_q, head_dim, head_dim_v: head_dim, causal: false, scale: 1.0 / (head_dim as f64).sqrt() }
    }

    fn inputs(p: &Problem) -> [Vec<f32>; 3] {
        let (nq, nk) = (p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.batch * p.seqlen_k * p.heads_kv * p.head_dim);
        let nv = p.batch * p.seqlen_k * p.heads_kv * p.head_dim_v;
        // Deterministic values in (-1, 1), different per tensor.
        let fill = |n: usize, salt: usize| (0..n).map(|i| (((i * 7919 + salt) % 1000) as f32 / 500.0) - 1.0).collect();
        [fill(nq, 1), fill(nk, 2), fill(nv, 3)]
    }

    #[test]
    fn the_output_is_head_dim_v_wide() {
        let p = Problem { head_dim_v: 8, causal: true, ..problem(2, 5, 7, 4, 16) };
        let [q, k, v] = inputs(&p);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let mut out: Vec<f32> = reference_forward(&p, &x).0.iter().map(|&v| v as f32).collect();
        assert_eq!(out.len(), 2 * 5 * 4 * 8);
        let tol = Tolerance::for_dtype(DType::F16);
        assert_eq!(check(&p, &Variants::NONE, &x, &out, tol).into_result("shape").unwrap().rows, 2 * 4 * 5);
        // Element (batch 1, row 3, head 2, col 5) of rows 8 wide.
        out[((5 + 3) * 4 + 2) * 8 + 5] += 0.01;
        let err = check(&p, &Variants::NONE, &x, &out, tol).into_result("dv").unwrap_err();
        assert!(err.contains("batch 1, row 3, head 2, col 5"), "{err}");
        // Sampled rows too.
        let big = Problem { head_dim_v: 32, ..problem(1, 2048, 2048, 2, 64) };
        let [q, k, v] = inputs(&big);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let window = Variants { window: (Some(0), Some(0)), ..Variants::NONE };
        // A window of one key: each output row is its own value row.
        let o = check(&big, &window, &x, &v, tol);
        assert_eq!((o.rows, o.mismatch), (SAMPLE_ROWS, None));
    }

    #[test]
    fn sample_spreads_over_all_rows_including_first_and_last() {
        let p = problem(3, 100, 100, 4, 64);
        let rows = sample_rows(&p, 64);
        assert_eq!(rows.len(), 64);
        assert_eq!(rows[0], (0, 0, 0));
        assert_eq!(*rows.last().unwrap(), (2, 3, 99));
        for b in 0..3 {
            assert!(rows.iter().any(|r| r.0 == b));
        }
        assert_eq!(sample_rows(&problem(1, 2, 2, 1, 64), 64), vec![(0, 0, 0), (0, 0, 1)]);
        assert_eq!(sample_rows(&problem(1, 1, 1, 1, 64), 64), vec![(0, 0, 0)]);
    }

    #[test]
    fn exact_output_passes_and_a_wrong_element_is_named() {
        let p = Problem { heads_kv: 2, causal: true, ..problem(2, 5, 7, 4, 16) };
        let [q, k, v] = inputs(&p);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let mut out: Vec<f32> = reference_forward(&p, &x).0.iter().map(|&v| v as f32).collect();
        let tol = Tolerance::for_dtype(DType::F16);
        let ok = check(&p, &Variants::NONE, &x, &out, tol).into_result("shape").unwrap();
        assert_eq!(ok.rows, 2 * 4 * 5);
        assert!(ok.max_abs_err < 1e-6);
        // Element (batch 1, row 3, head 2, col 5).
        out[((5 + 3) * 4 + 2) * 16 + 5] += 0.01;
        let err = check(&p, &Variants::NONE, &x, &out, tol).into_result("B=2 ... causal").unwrap_err();
        assert!(err.contains("B=2 ... causal") && err.contains("batch 1, row 3, head 2, col 5"), "{err}");
    }

    #[test]
    fn modified_rows_are_checked_against_the_modified_reference() {
        let p = Problem { causal: true, ..problem(1, 24, 24, 2, 16) };
        let [q, k, v] = inputs(&p);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let (slopes, sinks) = ([0.5, 0.25], [1.0, -1.5]);
        let var = Variants { window: (Some(4), Some(0)), softcap: Some(0.5), alibi: Some(&slopes), sinks: Some(&sinks), blocks: None, bias: None };
        let tol = Tolerance::for_dtype(DType::F16);
        let modified: Vec<f32> = reference_forward_with(&p, &var, &x).0.iter().map(|&v| v as f32).collect();
        assert!(check(&p, &var, &x, &modified, tol).mismatch.is_none());
        // Plain attention's output is not that of the modified problem, nor the other way round.
        let plain: Vec<f32> = reference_forward(&p, &x).0.iter().map(|&v| v as f32).collect();
        assert!(check(&p, &var, &x, &plain, tol).mismatch.is_some());
        assert!(check(&p, &Variants::NONE, &x, &modified, tol).mismatch.is_some());
        // Sampled rows take the modifications too.
        let big = Problem { causal: false, ..problem(1, 2048, 2048, 2, 64) };
        let [q, k, v] = inputs(&big);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let window = Variants { window: (Some(0), Some(0)), ..Variants::NONE };
        // A window of one key: each output row is its own value row.
        let out: Vec<f32> = v.clone();
        let o = check(&big, &window, &x, &out, Tolerance::for_dtype(DType::F16));
        assert_eq!((o.rows, o.mismatch), (SAMPLE_ROWS, None));
    }

    #[test]
    fn nan_fails_and_relative_part_scales_with_magnitude() {
        let tol = Tolerance::for_dtype(DType::F16);
        let offset = |(_, _, i): RowIndex| i;
        let want = [4.0f64];
        // 4.003 is within 2e-3 + 1e-3 * 4 of 4.
        let within = compare(&[4.003], std::iter::once(((0, 0, 0), &want[..])), offset, tol);
        assert!(within.mismatch.is_none());
        let nan = compare(&[f32::NAN], std::iter::once(((0, 0, 0), &want[..])), offset, tol);
        assert_eq!(nan.max_abs_err, f64::INFINITY);
        assert!(nan.mismatch.is_some());
    }

    #[test]
    fn large_shapes_are_sampled() {
        let p = problem(1, 2048, 2048, 2, 64);
        assert!(p.batch * p.heads_q * p.seqlen_q * p.seqlen_k * p.head_dim > FULL_CHECK_MACS);
        let [q, k, v] = inputs(&p);
        let x = RefInputs { q: &q, k: &k, v: &v };
        let out = vec![0.0f32; q.len()];
        let o = check(&p, &Variants::NONE, &x, &out, Tolerance::for_dtype(DType::Bf16));
        assert_eq!(o.rows, SAMPLE_ROWS);
    }
}
