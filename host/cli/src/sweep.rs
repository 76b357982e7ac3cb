//! The shapes a benchmark run times: the standard sweep, narrowed or overridden by options.

use crate::configs::Config;
use flashrs::{AttentionParams, AttentionParamsBuilder, KernelPath};
use serde::{Deserialize, Serialize};

/// Query tokens per row of the standard sweep: `batch = TOKENS / seqlen`, so every row moves
/// the same amount of data and only the sequence length changes.
pub const TOKENS: usize = 16384;
/// Model width of the standard sweep: `heads = WIDTH / head_dim`.
pub const WIDTH: usize = 2048;
/// Sequence lengths of the standard sweep.
pub const SEQLENS: [usize; 6] = [512, 1024, 2048, 4096, 8192, 16384];
/// Head dimensions of the standard sweep.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// One attention problem, without element type or kernel choice.
///
/// Field names are part of the JSON/CSV output and of the torch script's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Query rows per sequence.
    pub seqlen_q: usize,
    /// Key/value rows per sequence.
    pub seqlen_k: usize,
    /// Head dimension of Q and K (and of V and the output unless `head_dim_v` says otherwise).
    pub head_dim: usize,
    /// Head dimension of V and the output (`--head-dim-v`); `None`: `head_dim`. Absent from
    /// the JSON and CSV output when `None`, so that files of runs without it keep their form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim_v: Option<usize>,
    /// Causal masking (bottom-right aligned).
    pub causal: bool,
}

impl Shape {
    /// Head dimension of V and the output.
    pub fn head_dim_v(&self) -> usize {
        self.head_dim_v.unwrap_or(self.head_dim)
    }

    /// The head dimensions as tables show them ([`dims_label`]).
    pub fn dims(&self) -> String {
        dims_label(self.head_dim, self.head_dim_v())
    }

    /// Library parameters for this shape (contiguous `[batch, seqlen, heads, head_dim]`).
    pub fn params(&self, path: KernelPath, config: Option<Config>) -> AttentionParamsBuilder<'static> {
        let p = AttentionParams::builder()
            .batch(self.batch)
            .seqlen_q(self.seqlen_q)
            .seqlen_k(self.seqlen_k)
            .heads_q(self.heads_q)
            .heads_kv(self.heads_kv)
            .head_dim(self.head_dim)
            .causal(self.causal)
            .path(path);
        // Set only when given, so that plain rows build exactly the parameters they always did.
        let p = match self.head_dim_v {
            Some(dv) => p.head_dim_v(dv),
            None => p,
        };
        match config {
            Some(c) => c.apply(p),
            None => p,
        }
    }

    /// Floating-point operations of plain attention, by the library's convention (see
    /// [`AttentionParams::flops`]; a window's rows count theirs through
    /// [`crate::mods::ModSpec::flops`]).
    pub fn flops(&self) -> f64 {
        self.params(KernelPath::Auto, None).build().map_or(f64::NAN, |p| p.flops())
    }

    /// Bytes that must cross the memory bus at least: Q, K and V read once at `input_bytes` an
    /// element (2, or 1 for FP8 inputs), the 16-bit O written once.
    pub fn min_bytes(&self, input_bytes: usize) -> f64 {
        let rows_q = self.batch * self.seqlen_q * self.heads_q;
        (rows_q * (self.head_dim * input_bytes + self.head_dim_v() * 2)) as f64 + self.kv_bytes(input_bytes)
    }

    /// Bytes of K and V (read once) at `elem_bytes` an element: the traffic that bounds decode.
    pub fn kv_bytes(&self, elem_bytes: usize) -> f64 {
        (self.batch * self.seqlen_k * self.heads_kv * (self.head_dim + self.head_dim_v()) * elem_bytes) as f64
    }

    /// Compact description for messages and progress lines.
    pub fn label(&self) -> String {
        format!(
            "B={} Hq={} Hkv={} Sq={} Sk={} D={} {}",
            self.batch,
            self.heads_q,
            self.heads_kv,
            self.seqlen_q,
            self.seqlen_k,
            self.dims(),
            if self.causal { "causal" } else { "non-causal" }
        )
    }
}

/// Head dimensions as tables, labels and plots show them: `192/128` (Q and K's, then V's) when
/// V's differs, else the one (`128`), as every table showed it before V could differ.
pub fn dims_label(head_dim: usize, head_dim_v: usize) -> String {
    if head_dim_v == head_dim { head_dim.to_string() } else { format!("{head_dim}/{head_dim_v}") }
}

/// Which shapes to run. Each field overrides or narrows one axis of the standard sweep; with
/// every field empty the result is exactly the standard sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepSpec {
    /// Head dimensions (empty: [`HEAD_DIMS`]).
    pub head_dims: Vec<usize>,
    /// Query sequence lengths (empty: [`SEQLENS`]).
    pub seqlens: Vec<usize>,
    /// Key/value sequence length (default: the query's).
    pub seqlen_k: Option<usize>,
    /// Batch size (default: `TOKENS / seqlen_q`, at least 1).
    pub batch: Option<usize>,
    /// Query heads (default: `WIDTH / head_dim`, at least 1).
    pub heads: Option<usize>,
    /// Key/value heads (default: the query heads).
    pub heads_kv: Option<usize>,
    /// Head dimension of V and the output of every row (default: each row's `head_dim`).
    pub head_dim_v: Option<usize>,
    /// Causal settings to run, in order.
    pub causal: Vec<bool>,
    /// The decode sweep instead of the standard one ([`DECODE_BATCHES`] x [`DECODE_CACHES`],
    /// [`DECODE_HEADS`] query and [`DECODE_HEADS_KV`] key/value heads, head_dim 128, one query
    /// row); `batch`, `seqlens` (query rows), `seqlen_k` (cache), `heads`, `heads_kv` and
    /// `head_dims` override its axes.
    pub decode: bool,
}

/// Batch sizes of the decode sweep.
pub const DECODE_BATCHES: [usize; 3] = [1, 8, 64];
/// KV-cache lengths of the decode sweep.
pub const DECODE_CACHES: [usize; 4] = [1024, 8192, 32768, 131072];
/// Query heads of the decode sweep.
pub const DECODE_HEADS: usize = 32;
/// Key/value heads of the decode sweep (GQA group of 4).
pub const DECODE_HEADS_KV: usize = 8;

impl SweepSpec {
    /// The decode sweep's shapes, ordered by head_dim, query rows, batch, cache, causal (the
    /// decode anchors' order).
    fn decode_shapes(&self) -> Result<Vec<Shape>, String> {
        let or = |given: &[usize], default: &[usize]| if given.is_empty() { default.to_vec() } else { given.to_vec() };
        let batches = self.batch.map_or(DECODE_BATCHES.to_vec(), |b| vec![b]);
        let caches = self.seqlen_k.map_or(DECODE_CACHES.to_vec(), |k| vec![k]);
        let mut shapes = Vec::new();
        for head_dim in or(&self.head_dims, &[128]) {
            for seqlen_q in or(&self.seqlens, &[1]) {
                for &batch in &batches {
                    for &seqlen_k in &caches {
                        for &causal in &self.causal {
                            let heads_q = self.heads.unwrap_or(DECODE_HEADS);
                            let heads_kv = self.heads_kv.unwrap_or(DECODE_HEADS_KV.min(heads_q));
                            let shape = Shape { batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v: self.head_dim_v, causal };
                            check(&shape)?;
                            shapes.push(shape);
                        }
                    }
                }
            }
        }
        Ok(shapes)
    }
}

impl SweepSpec {
    /// The shapes, ordered by head_dim, then seqlen, then causal (the anchors' order).
    ///
    /// Fails on values no kernel can take (zeros, heads not a multiple of key/value heads);
    /// everything else the library's planner checks.
    pub fn shapes(&self) -> Result<Vec<Shape>, String> {
        if self.decode {
            return self.decode_shapes();
        }
        let or_default = |given: &[usize], default: &[usize]| if given.is_empty() { default.to_vec() } else { given.to_vec() };
        let head_dims = or_default(&self.head_dims, &HEAD_DIMS);
        let seqlens = or_default(&self.seqlens, &SEQLENS);
        let mut shapes = Vec::new();
        for &head_dim in &head_dims {
            for &seqlen_q in &seqlens {
                for &causal in &self.causal {
                    let heads_q = self.heads.unwrap_or((WIDTH / head_dim.max(1)).max(1));
                    let shape = Shape {
                        batch: self.batch.unwrap_or((TOKENS / seqlen_q.max(1)).max(1)),
                        heads_q,
                        heads_kv: self.heads_kv.unwrap_or(heads_q),
                        seqlen_q,
                        seqlen_k: self.seqlen_k.unwrap_or(seqlen_q),
                        head_dim,
                        head_dim_v: self.head_dim_v,
                        causal,
                    };
                    check(&shape)?;
                    shapes.push(shape);
                }
            }
        }
        Ok(shapes)
    }
}

/// Rejects sizes no kernel takes whatever the configuration.
fn check(s: &Shape) -> Result<(), String> {
    let dims = [
        ("batch", s.batch),
        ("heads", s.heads_q),
        ("heads-kv", s.heads_kv),
        ("seqlen", s.seqlen_q),
        ("seqlen-k", s.seqlen_k),
        ("head-dim", s.head_dim),
        ("head-dim-v", s.head_dim_v()),
    ];
    if let Some((name, _)) = dims.iter().find(|(_, n)| *n == 0) {
        return Err(format!("--{name} must be at least 1"));
    }
    if !s.heads_q.is_multiple_of(s.heads_kv) {
        return Err(format!("{}: query heads must be a multiple of key/value heads", s.label()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both() -> Vec<bool> {
        vec![false, true]
    }

    #[test]
    fn default_spec_is_the_anchor_sweep() {
        let shapes = SweepSpec { causal: both(), ..Default::default() }.shapes().unwrap();
        assert_eq!(shapes.len(), 3 * 6 * 2);
        // Every row holds 16k query tokens and a 2048-wide model.
        assert!(shapes.iter().all(|s| s.batch * s.seqlen_q == 16384 && s.heads_q * s.head_dim == 2048));
        assert!(shapes.iter().all(|s| s.heads_kv == s.heads_q && s.seqlen_k == s.seqlen_q));
        // Rows named in anchors/h100-torch-sdpa.txt, in its order.
        let first = Shape { batch: 32, heads_q: 32, heads_kv: 32, seqlen_q: 512, seqlen_k: 512, head_dim: 64, head_dim_v: None, causal: false };
        assert_eq!(shapes[0], first);
        assert_eq!(shapes[1], Shape { causal: true, ..first });
        let last = shapes.last().unwrap();
        assert_eq!((last.batch, last.heads_q, last.seqlen_q, last.head_dim, last.causal), (1, 8, 16384, 256, true));
    }

    #[test]
    fn options_narrow_or_override_axes() {
        let spec = SweepSpec {
            head_dims: vec![128],
            seqlens: vec![4096],
            seqlen_k: Some(8192),
            heads_kv: Some(4),
            causal: vec![true],
            ..Default::default()
        };
        let s = spec.shapes().unwrap();
        let want = Shape { batch: 4, heads_q: 16, heads_kv: 4, seqlen_q: 4096, seqlen_k: 8192, head_dim: 128, head_dim_v: None, causal: true };
        assert_eq!(s, vec![want]);
        let fixed = SweepSpec { batch: Some(3), heads: Some(5), head_dims: vec![96], causal: vec![false], ..Default::default() };
        assert!(fixed.shapes().unwrap().iter().all(|s| (s.batch, s.heads_q, s.head_dim) == (3, 5, 96)));
    }

    #[test]
    fn rejects_zero_sizes_and_bad_gqa_ratio() {
        let zero = SweepSpec { batch: Some(0), causal: both(), ..Default::default() };
        assert_eq!(zero.shapes().unwrap_err(), "--batch must be at least 1");
        let ratio = SweepSpec { head_dims: vec![128], heads_kv: Some(3), causal: both(), ..Default::default() };
        assert!(ratio.shapes().unwrap_err().contains("multiple of key/value heads"));
    }

    #[test]
    fn decode_sweep_is_the_decode_anchors() {
        let s = SweepSpec { decode: true, causal: vec![false], ..Default::default() }.shapes().unwrap();
        assert_eq!(s.len(), 3 * 4);
        assert!(s.iter().all(|s| (s.heads_q, s.heads_kv, s.head_dim, s.seqlen_q, s.causal) == (32, 8, 128, 1, false)));
        assert_eq!((s[0].batch, s[0].seqlen_k), (1, 1024));
        assert_eq!((s[11].batch, s[11].seqlen_k), (64, 131072));
        assert_eq!(s[0].kv_bytes(2), (2 * 1024 * 8 * 128 * 2) as f64);
        let one = SweepSpec { decode: true, batch: Some(8), seqlen_k: Some(4096), seqlens: vec![4], causal: vec![true], ..Default::default() };
        let s = one.shapes().unwrap();
        assert_eq!(s, vec![Shape { batch: 8, heads_q: 32, heads_kv: 8, seqlen_q: 4, seqlen_k: 4096, head_dim: 128, head_dim_v: None, causal: true }]);
    }

    #[test]
    fn head_dim_v_reaches_the_parameters() {
        let s = Shape { batch: 2, heads_q: 8, heads_kv: 2, seqlen_q: 4, seqlen_k: 16, head_dim: 192, head_dim_v: Some(128), causal: false };
        let p = s.params(KernelPath::Auto, None).build().unwrap();
        assert_eq!((p.head_dim, p.head_dim_v, p.head_dim_v()), (192, Some(128), 128));
        assert_eq!(s.flops(), p.flops());
        assert_eq!(s.flops(), 2.0 * 2.0 * 8.0 * 4.0 * 16.0 * (192.0 + 128.0));
        assert_eq!((s.head_dim_v(), s.dims()), (128, "192/128".to_string()));
        assert!(s.label().contains(" D=192/128 "));
        // Without it, V is K's width and the parameters leave the field unset.
        let plain = Shape { head_dim_v: None, ..s };
        assert_eq!((plain.params(KernelPath::Auto, None).build().unwrap().head_dim_v, plain.dims()), (None, "192".to_string()));
        assert_eq!(Shape { head_dim_v: Some(192), ..s }.dims(), "192");
        let spec = SweepSpec { head_dims: vec![192], head_dim_v: Some(128), causal: both(), ..Default::default() };
        assert!(spec.shapes().unwrap().iter().all(|s| s.head_dim_v == Some(128)));
    }

    #[test]
    fn traffic_and_flops() {
        let s = Shape { batch: 2, heads_q: 8, heads_kv: 2, seqlen_q: 4, seqlen_k: 16, head_dim: 64, head_dim_v: None, causal: true };
        assert_eq!(s.min_bytes(2), ((2 * 2 * 4 * 8 * 64) + (2 * 2 * 16 * 2 * 64)) as f64 * 2.0);
        assert_eq!(s.flops(), 4.0 * 2.0 * 8.0 * 4.0 * 16.0 * 64.0 / 2.0);
    }
}
