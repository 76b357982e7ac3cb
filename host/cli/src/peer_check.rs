//! `--verify` for FlashAttention-3 on FP8 rows (`--dtype e4m3 --verify --compare fa3|torch`):
//! FA3 runs once on the very E4M3 Q, K and V bytes our row uploaded, and its output is checked
//! against the reference of those inputs by the same [`verify::check`] as ours, so that the two
//! errors are of one problem on one set of inputs ("ours <= FA3's" can be read off the table).
//! The torch script draws no inputs and computes no reference for this: our inputs go to it in
//! a file ([`SharedInputs`]), and FA3's output comes back in another, which the script writes.
//!
//! FA3's error is a figure, not a test: only ours must be within [`Tolerance::FP8_INPUTS`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use flashrs::Fp8;
use flashrs::element::fp8_to_f32;
use flashrs_reference::{Problem, RefInputs, Variants};

use super::record::{Implementation, Record};
use super::sweep::Shape;
use super::torch::Session;
use super::verify::{self, Tolerance};

/// FA3's check on one row's inputs: its error against our reference, or why there is none.
pub type Check = Result<verify::Outcome, String>;

/// The checks of a run's rows, by shape (as [`attach`] takes them).
pub type Checks = Vec<(Shape, Check)>;

/// One row's FP8 inputs in a file for the torch script, and the file the script writes FA3's
/// output to. Both are removed when this is dropped: a sweep holds one row's at a time.
///
/// The inputs file holds Q's bytes, then K's, then V's, each contiguous `[batch, seqlen, heads,
/// head_dim]` (V `head_dim_v` wide), one E4M3 byte an element: FlashAttention's own layout, the
/// script's to load with no arithmetic. The output file is the script's to write: bf16,
/// little-endian, contiguous `[batch, seqlen_q, heads_q, head_dim_v]`.
#[derive(Debug)]
pub struct SharedInputs {
    /// The row's shape, as the script is asked for it.
    shape: Shape,
    /// The problem our reference solves (with the scale our call used).
    problem: Problem,
    /// The inputs' format.
    fp8: Fp8,
    /// Q, K and V.
    inputs: PathBuf,
    /// FA3's output, once the script has written it.
    output: PathBuf,
}

impl SharedInputs {
    /// Writes `q`, `k` and `v` (each at least as many bytes as `problem` has elements of it,
    /// contiguous `[batch, seqlen, heads, head_dim]`; bytes past that, the padding of a 16-bit
    /// word, are left out) as the inputs file of a new temporary pair.
    pub fn write(shape: Shape, problem: Problem, fp8: Fp8, tensors: [&[u8]; 3]) -> Result<Self, String> {
        // Unique per pair: a sweep's rows and concurrent tests each get their own.
        static WRITTEN: AtomicUsize = AtomicUsize::new(0);
        let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
        let stem = std::env::temp_dir().join(format!("flashrs-fa3-check-{}-{n}", std::process::id()));
        let shared = SharedInputs { shape, problem, fp8, inputs: stem.with_extension("inputs.bin"), output: stem.with_extension("output.bin") };
        let mut bytes = Vec::with_capacity(counts(&problem).iter().sum());
        for (t, (n, name)) in tensors.iter().zip(counts(&problem).into_iter().zip(["Q", "K", "V"])) {
            bytes.extend_from_slice(t.get(..n).ok_or_else(|| format!("{name} has {} bytes, not the {n} of its elements", t.len()))?);
        }
        std::fs::write(&shared.inputs, bytes).map_err(|e| format!("cannot write {}: {e}", shared.inputs.display()))?;
        Ok(shared)
    }

    /// The row's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The inputs' format.
    pub fn fp8(&self) -> Fp8 {
        self.fp8
    }

    /// The inputs file.
    pub fn inputs(&self) -> &Path {
        &self.inputs
    }

    /// Where FA3's output goes.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// The output file against the reference of the inputs file, as `--verify` checks ours:
    /// the same inputs (the bytes decoded as our buffers' are), problem, reference and
    /// tolerance. Its mismatch, if any, is FA3's and fails nothing.
    pub fn check(&self) -> Check {
        let read = |path: &Path| std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
        let (inputs, output) = (read(&self.inputs)?, read(&self.output)?);
        let [nq, nk, nv] = counts(&self.problem);
        if inputs.len() != nq + nk + nv {
            return Err(format!("{} holds {} bytes, not the {} of Q, K and V", self.inputs.display(), inputs.len(), nq + nk + nv));
        }
        let decoded: Vec<f32> = inputs.iter().map(|&b| fp8_to_f32(self.fp8, b)).collect();
        let (q, rest) = decoded.split_at(nq);
        let (k, v) = rest.split_at(nk);
        let out = bf16_values(&output, out_len(&self.problem)).map_err(|why| format!("{}: {why}", self.output.display()))?;
        // FP8 rows take no attention modifications (the options refuse them; `share` in the
        // runner shares plain rows only): the reference is plain attention.
        Ok(verify::check(&self.problem, &Variants::NONE, &RefInputs { q, k, v }, &out, Tolerance::FP8_INPUTS))
    }
}

impl Drop for SharedInputs {
    fn drop(&mut self) {
        // The output may never have been written; a file left behind changes no result.
        let _ = std::fs::remove_file(&self.inputs);
        let _ = std::fs::remove_file(&self.output);
    }
}

/// Elements of Q, K and V.
fn counts(p: &Problem) -> [usize; 3] {
    let rows_k = p.batch * p.seqlen_k * p.heads_kv;
    [p.batch * p.seqlen_q * p.heads_q * p.head_dim, rows_k * p.head_dim, rows_k * p.head_dim_v]
}

/// Elements of the output.
fn out_len(p: &Problem) -> usize {
    p.batch * p.seqlen_q * p.heads_q * p.head_dim_v
}

/// `n` little-endian bf16 values from `bytes`, which must hold exactly that many.
fn bf16_values(bytes: &[u8], n: usize) -> Result<Vec<f32>, String> {
    if bytes.len() != 2 * n {
        return Err(format!("{} bytes, not the {} of {n} bf16 outputs", bytes.len(), 2 * n));
    }
    Ok(bytes.chunks_exact(2).map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()).collect())
}

/// `[batch, heads, seqlen, d]` elements (our `--layout bhsd` buffers) as `[batch, seqlen,
/// heads, d]` (the inputs file's and the reference's layout); elements past them are left out.
pub fn bshd_from_bhsd<T: Copy>(bytes: &[T], [batch, heads, seqlen, d]: [usize; 4]) -> Vec<T> {
    let mut out = Vec::with_capacity(batch * seqlen * heads * d);
    for b in 0..batch {
        for s in 0..seqlen {
            for h in 0..heads {
                let at = ((b * heads + h) * seqlen + s) * d;
                out.extend_from_slice(&bytes[at..at + d]);
            }
        }
    }
    out
}

/// Runs FA3 once on `shared` through `session` and checks the output it wrote; a row whose
/// inputs could not be shared says why.
pub fn check_fa3(session: &mut Session, shared: &Result<SharedInputs, String>) -> Check {
    let shared = shared.as_ref().map_err(String::clone)?;
    session.run_fa3_on(shared)?;
    shared.check()
}

/// Gives each FA3 record of `records` the check of its shape in `checks`, if any: its error
/// and rows compared, as ours carry them; a timed record whose check failed says why in its
/// note (an n/a one says why FA3 did not run already, which is why its check failed too).
pub fn attach(records: &mut [Record], checks: &[(Shape, Check)]) {
    for r in records.iter_mut().filter(|r| r.implementation == Implementation::Fa3) {
        match checks.iter().find(|(s, _)| *s == r.shape).map(|c| &c.1) {
            Some(Ok(o)) => (r.max_abs_err, r.verified_rows) = (Some(o.max_abs_err), Some(o.rows)),
            Some(Err(why)) if r.median_ms.is_some() => r.note = Some(format!("not verified on flashrs's inputs: {why}")),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::element::fp8_from_f32;
    use flashrs_reference::reference_forward;

    /// A tiny GQA problem: 2 query heads on 1 KV head, V narrower than K.
    fn tiny() -> (Shape, Problem) {
        let shape = Shape { batch: 2, heads_q: 2, heads_kv: 1, seqlen_q: 3, seqlen_k: 5, head_dim: 16, head_dim_v: Some(8), causal: true };
        let problem = Problem { batch: 2, seqlen_q: 3, seqlen_k: 5, heads_q: 2, heads_kv: 1, head_dim: 16, head_dim_v: 8, causal: true, scale: 0.25 };
        (shape, problem)
    }

    /// E4M3 bytes of distinct values in [-2, 2) for each tensor, with a padding byte after each.
    fn bytes(p: &Problem) -> [Vec<u8>; 3] {
        let fill = |n: usize, salt: usize| (0..n + 1).map(|i| fp8_from_f32(Fp8::E4m3, ((i * 37 + salt) % 64) as f32 / 16.0 - 2.0)).collect();
        let [nq, nk, nv] = counts(p);
        [fill(nq, 1), fill(nk, 2), fill(nv, 3)]
    }

    #[test]
    fn the_inputs_file_is_q_k_and_v_without_padding_and_both_files_go_when_dropped() {
        let (shape, p) = tiny();
        let [q, k, v] = bytes(&p);
        let shared = SharedInputs::write(shape, p, Fp8::E4m3, [&q, &k, &v]).unwrap();
        let file = std::fs::read(shared.inputs()).unwrap();
        let [nq, nk, nv] = counts(&p);
        assert_eq!((nq, nk, nv), (2 * 3 * 2 * 16, 2 * 5 * 16, 2 * 5 * 8));
        assert_eq!(file, [&q[..nq], &k[..nk], &v[..nv]].concat());
        std::fs::write(shared.output(), [0u8; 4]).unwrap();
        let (inputs, output) = (shared.inputs().to_path_buf(), shared.output().to_path_buf());
        assert_ne!(inputs, output);
        drop(shared);
        assert!(!inputs.exists() && !output.exists());
        // Too few bytes for a tensor's elements: refused, naming it.
        let err = SharedInputs::write(shape, p, Fp8::E4m3, [&q, &k[..nk - 1], &v]).unwrap_err();
        assert!(err.starts_with("K has"), "{err}");
    }

    #[test]
    fn the_error_is_the_output_files_against_the_reference_of_the_inputs_file() {
        let (shape, p) = tiny();
        let [q, k, v] = bytes(&p);
        let shared = SharedInputs::write(shape, p, Fp8::E4m3, [&q, &k, &v]).unwrap();
        // Not written yet: no check, and why.
        assert!(shared.check().unwrap_err().contains("cannot read"));
        // The reference of the decoded bytes, an output of its bf16 roundings with one element
        // a quarter off.
        let decode = |b: &[u8], n: usize| b[..n].iter().map(|&x| fp8_to_f32(Fp8::E4m3, x)).collect::<Vec<f32>>();
        let [nq, nk, nv] = counts(&p);
        let (dq, dk, dv) = (decode(&q, nq), decode(&k, nk), decode(&v, nv));
        let reference = reference_forward(&p, &RefInputs { q: &dq, k: &dk, v: &dv }).0;
        let mut out: Vec<half::bf16> = reference.iter().map(|&x| half::bf16::from_f64(x)).collect();
        out[13] = half::bf16::from_f64(reference[13] + 0.25);
        let want = out.iter().zip(&reference).map(|(o, r)| (o.to_f64() - r).abs()).fold(0.0, f64::max);
        assert!(want > 0.2 && want < 0.3, "{want}");
        std::fs::write(shared.output(), out.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let o = shared.check().unwrap();
        assert_eq!((o.max_abs_err, o.rows), (want, 2 * 2 * 3));
        // FA3's mismatch is reported, not raised: it is over our tolerance here.
        assert!(o.mismatch.is_some());
        // An output of the wrong size is no check.
        std::fs::write(shared.output(), [0u8; 6]).unwrap();
        assert!(shared.check().unwrap_err().contains("6 bytes, not the 192 of 96 bf16 outputs"));
    }

    #[test]
    fn bhsd_bytes_become_bshd() {
        // Element (b, h, s, d) holds its own coordinates; one padding byte after them.
        let dims = [2, 3, 4, 2];
        let mut bhsd = Vec::new();
        for b in 0..2u8 {
            for h in 0..3u8 {
                for s in 0..4u8 {
                    bhsd.extend([b * 64 + h * 16 + s * 2, b * 64 + h * 16 + s * 2 + 1]);
                }
            }
        }
        bhsd.push(0xff);
        let bshd = bshd_from_bhsd(&bhsd, dims);
        assert_eq!(bshd.len(), 2 * 3 * 4 * 2);
        // (b 1, s 2, h 1, d 1) sits at ((1 * 4 + 2) * 3 + 1) * 2 + 1.
        assert_eq!(bshd[((4 + 2) * 3 + 1) * 2 + 1], 64 + 16 + 4 + 1);
        assert_eq!(bshd_from_bhsd(&bhsd, [1, 1, 4, 2]), bhsd[..8]);
    }

    #[test]
    fn fa3_records_take_their_shapes_check() {
        let (shape, _) = tiny();
        let other = Shape { causal: false, ..shape };
        let rec = |i, s| Record::new(i, s, "e4m3", "torch", "fa3").timed(1.0, 1.0);
        let na = |s| Record::new(Implementation::Fa3, s, "e4m3", "torch", "").unavailable("not installed");
        let mut records = vec![rec(Implementation::Fa3, shape), rec(Implementation::Fa3, other), rec(Implementation::TorchFa2, shape), na(shape)];
        let outcome = verify::Outcome { rows: 64, max_abs_err: 0.05, mismatch: None };
        attach(&mut records, &[(shape, Ok(outcome)), (other, Err("the torch script stopped".into()))]);
        assert_eq!((records[0].max_abs_err, records[0].verified_rows, records[0].note.as_deref()), (Some(0.05), Some(64), None));
        assert_eq!((records[1].max_abs_err, records[1].note.as_deref()), (None, Some("not verified on flashrs's inputs: the torch script stopped")));
        assert_eq!(records[2].max_abs_err, None);
        assert_eq!(records[3].max_abs_err, Some(0.05));
        // An n/a record keeps its own reason.
        let mut missing = vec![na(other)];
        attach(&mut missing, &[(other, Err("FlashAttention-3 is not installed".into()))]);
        assert_eq!(missing[0].note.as_deref(), Some("not installed"));
    }
}
