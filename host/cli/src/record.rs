//! One measured (or unavailable) result: the unit of every output format.

use flashrs::{DType, Fp8};
use serde::{Deserialize, Serialize};

use super::mods::ModSpec;
use super::sweep::Shape;

/// The element types of a run: 16-bit throughout, or FP8 Q, K and V with a 16-bit output
/// (`--dtype e4m3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Precision {
    /// The output's element type, and the inputs' unless `fp8_inputs` is set.
    pub out: DType,
    /// Q's, K's and V's FP8 format (`None`: `out`).
    pub fp8_inputs: Option<Fp8>,
}

impl Precision {
    /// The inputs' element type, as records and reports name it: `f16`, `bf16`, `e4m3`.
    pub fn name(self) -> &'static str {
        self.fp8_inputs.map_or(self.out.name(), Fp8::name)
    }
}

impl From<DType> for Precision {
    fn from(out: DType) -> Self {
        Precision { out, fp8_inputs: None }
    }
}

/// Who computed a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Implementation {
    /// This crate's kernels.
    #[serde(rename = "flashrs")]
    Flashrs,
    /// PyTorch SDPA, `SDPBackend.FLASH_ATTENTION` (FlashAttention-2).
    #[serde(rename = "torch-fa2")]
    TorchFa2,
    /// PyTorch SDPA, `SDPBackend.CUDNN_ATTENTION`.
    #[serde(rename = "torch-cudnn")]
    TorchCudnn,
    /// FlashAttention-3's forward (the `fa3-fwd` package, `fa3_fwd_interface.flash_attn_func`;
    /// bf16, or E4M3 inputs with a bf16 output), called from PyTorch.
    #[serde(rename = "fa3")]
    Fa3,
    /// PyTorch's FlexAttention (`torch.nn.attention.flex_attention`, compiled), timed on rows
    /// with attention modifications only: the window as a block mask, softcap and ALiBi as a
    /// score modification.
    #[serde(rename = "torch-flex")]
    TorchFlex,
}

impl Implementation {
    /// Every implementation, ours first: the column and legend order.
    pub const ALL: [Implementation; 5] = [Implementation::Flashrs, Implementation::TorchFa2, Implementation::TorchCudnn, Implementation::Fa3, Implementation::TorchFlex];

    /// Name in tables, plots and machine output (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Flashrs => "flashrs",
            Implementation::TorchFa2 => "torch-fa2",
            Implementation::TorchCudnn => "torch-cudnn",
            Implementation::Fa3 => "fa3",
            Implementation::TorchFlex => "torch-flex",
        }
    }
}

/// One row of machine output. Field names are stable: scripts read them from `--json` and
/// `--csv` (which has exactly these columns, in [`super::report::CSV_COLUMNS`] order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Who ran it.
    pub implementation: Implementation,
    /// The problem.
    #[serde(flatten)]
    pub shape: Shape,
    /// Its attention modifications, as their label (`window 4096,0; softcap 30`; empty for
    /// plain attention, and in files written before modifications existed).
    #[serde(default)]
    pub mods: ModSpec,
    /// Element type name of Q (and, unless `kv_dtype` says otherwise, of K and V): `f16`,
    /// `bf16`, or for FP8 inputs `e4m3` (whose output is 16-bit).
    pub dtype: String,
    /// Our kernel path (`auto`, `mma.sync`, ...) or `torch`.
    pub path: String,
    /// Our kernel's entry point, or how torch was called (e.g. `sdpa+enable_gqa`).
    pub kernel: String,
    /// Our tile configuration tag; `None` for torch.
    pub config: Option<String>,
    /// Median time in milliseconds; `None` when the implementation refused the shape.
    pub median_ms: Option<f64>,
    /// Fastest time in milliseconds.
    pub min_ms: Option<f64>,
    /// Tera floating-point operations per second at the median time.
    pub tflops: Option<f64>,
    /// Gigabytes per second of the minimum traffic (Q, K, V read once, O written once) at the
    /// median time: 2 bytes an element, but 1 for FP8 inputs (an FP8 `dtype`).
    pub gbps: Option<f64>,
    /// Gigabytes per second of K and V read once (`B * Sk * Hkv * (D + Dv) * 2` bytes, `Dv`
    /// V's head dimension) at the median time: the decode bandwidth figure.
    pub kv_gbps: Option<f64>,
    /// Largest absolute difference from the CPU reference, when verified.
    pub max_abs_err: Option<f64>,
    /// Query rows compared with the CPU reference, when verified.
    pub verified_rows: Option<usize>,
    /// Why there is no time, or other remarks.
    pub note: Option<String>,
    /// A backward-pass row: its TFLOPS count 2.5 forward passes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backward: bool,
    /// K's and V's element type where it is FP8 (a cache: `e4m3`, `e5m2`, or with FP8 inputs
    /// `dtype` itself); its K+V GB/s count one byte per element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_dtype: Option<String>,
}

impl Record {
    /// A record with no measurement yet; fill it with [`Record::timed`] or a note.
    pub fn new(implementation: Implementation, shape: Shape, dtype: &str, path: &str, kernel: &str) -> Self {
        Record {
            implementation,
            shape,
            mods: ModSpec::default(),
            dtype: dtype.to_string(),
            path: path.to_string(),
            kernel: kernel.to_string(),
            config: None,
            median_ms: None,
            min_ms: None,
            tflops: None,
            gbps: None,
            kv_gbps: None,
            max_abs_err: None,
            verified_rows: None,
            note: None,
            backward: false,
            kv_dtype: None,
        }
    }

    /// The record of a call whose K and V are of `kv` (set before [`Record::timed`]: it
    /// changes the bytes K and V take).
    pub fn with_kv(mut self, kv: Option<flashrs::Fp8>) -> Self {
        self.kv_dtype = kv.map(|k| k.name().to_string());
        self
    }

    /// The record of the problem with these modifications (set before [`Record::timed`]: a
    /// window changes the FLOP count).
    pub fn with_mods(mut self, mods: ModSpec) -> Self {
        self.mods = mods;
        self
    }

    /// The problem for messages: the shape's label, then the modifications in brackets.
    pub fn label(&self) -> String {
        match self.mods.is_plain() {
            true => self.shape.label(),
            false => format!("{} [{}]", self.shape.label(), self.mods),
        }
    }

    /// Sets the times and the rates derived from the median.
    pub fn timed(mut self, median_ms: f64, min_ms: f64) -> Self {
        let seconds = median_ms * 1e-3;
        self.median_ms = Some(median_ms);
        self.min_ms = Some(min_ms);
        let passes = if self.backward { 2.5 } else { 1.0 };
        self.tflops = Some(passes * self.mods.flops(&self.shape) / seconds / 1e12);
        // FP8 inputs: one byte an element of Q, K and V. (FP8 caches read by 16-bit queries
        // count two in GB/s, as their records always have; one in K+V GB/s.)
        self.gbps = Some(self.shape.min_bytes(if self.fp8_inputs() { 1 } else { 2 }) / seconds / 1e9);
        let kv_bytes = self.shape.kv_bytes(if self.kv_dtype.is_some() { 1 } else { 2 });
        self.kv_gbps = Some(kv_bytes / seconds / 1e9);
        self
    }

    /// Whether Q (and with it K and V) is FP8: `dtype` names an FP8 format.
    fn fp8_inputs(&self) -> bool {
        Fp8::ALL.iter().any(|f| f.name() == self.dtype)
    }

    /// Marks the shape as refused, with the reason.
    pub fn unavailable(mut self, why: impl Into<String>) -> Self {
        self.note = Some(why.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_the_median() {
        let shape = Shape { batch: 8, heads_q: 16, heads_kv: 16, seqlen_q: 2048, seqlen_k: 2048, head_dim: 128, head_dim_v: None, causal: false };
        let r = Record::new(Implementation::Flashrs, shape, "f16", "auto", "k").timed(0.5, 0.4);
        // 4 * 8 * 16 * 2048^2 * 128 flops in 0.5 ms.
        assert!((r.tflops.unwrap() - 4.0 * 8.0 * 16.0 * 2048.0 * 2048.0 * 128.0 / 0.5e-3 / 1e12).abs() < 1e-9);
        // 4 tensors of 8 * 2048 * 16 * 128 halves in 0.5 ms.
        assert!((r.gbps.unwrap() - 4.0 * 8.0 * 2048.0 * 16.0 * 128.0 * 2.0 / 0.5e-3 / 1e9).abs() < 1e-9);
        assert_eq!(r.min_ms, Some(0.4));
    }

    #[test]
    fn a_narrower_v_counts_its_own_flops_and_bytes_and_reads_back() {
        let plain = Shape { batch: 8, heads_q: 16, heads_kv: 4, seqlen_q: 2048, seqlen_k: 2048, head_dim: 192, head_dim_v: None, causal: false };
        let shape = Shape { head_dim_v: Some(128), ..plain };
        let r = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").timed(0.5, 0.4);
        // Q K^T over 192 columns, P V over 128.
        assert!((r.tflops.unwrap() - 2.0 * 8.0 * 16.0 * 2048.0 * 2048.0 * (192.0 + 128.0) / 0.5e-3 / 1e12).abs() < 1e-9);
        // Q (192) and O (128) per query row and head; K (192) and V (128) per key row and head.
        let bytes = (8.0 * 2048.0 * 16.0 * 320.0 + 8.0 * 2048.0 * 4.0 * 320.0) * 2.0;
        assert!((r.gbps.unwrap() - bytes / 0.5e-3 / 1e9).abs() < 1e-9);
        assert!((r.kv_gbps.unwrap() - 8.0 * 2048.0 * 4.0 * 320.0 * 2.0 / 0.5e-3 / 1e9).abs() < 1e-9);
        // FP8 K and V: one byte an element.
        let fp8 = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").with_kv(Some(flashrs::Fp8::E4m3)).timed(0.5, 0.4);
        assert!((fp8.kv_gbps.unwrap() - 8.0 * 2048.0 * 4.0 * 320.0 / 0.5e-3 / 1e9).abs() < 1e-9);
        assert_eq!(fp8.kv_dtype.as_deref(), Some("e4m3"));
        assert_eq!(r.label(), "B=8 Hq=16 Hkv=4 Sq=2048 Sk=2048 D=192/128 non-causal");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!((&v["head_dim"], &v["head_dim_v"]), (&192.into(), &128.into()));
        assert_eq!(serde_json::from_value::<Record>(v).unwrap(), r);
        // Without it the record has no such key, as files from before it existed, which read
        // back as V as wide as K.
        let p = serde_json::to_value(Record::new(Implementation::Flashrs, plain, "bf16", "auto", "k")).unwrap();
        assert!(p.get("head_dim_v").is_none());
        assert_eq!(serde_json::from_value::<Record>(p).unwrap().shape, plain);
    }

    #[test]
    fn fp8_inputs_count_a_byte_an_input_element_and_the_same_flops() {
        let shape = Shape { batch: 8, heads_q: 16, heads_kv: 4, seqlen_q: 2048, seqlen_k: 2048, head_dim: 128, head_dim_v: None, causal: true };
        let e4m3 = Precision { out: DType::Bf16, fp8_inputs: Some(Fp8::E4m3) };
        assert_eq!((e4m3.name(), Precision::from(DType::Bf16).name(), Precision::from(DType::F16).name()), ("e4m3", "bf16", "f16"));
        let bf16 = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").timed(0.5, 0.4);
        let fp8 = Record::new(Implementation::Flashrs, shape, e4m3.name(), "auto", "k").with_kv(e4m3.fp8_inputs).timed(0.5, 0.4);
        assert_eq!(fp8.tflops, bf16.tflops);
        // Q, K and V one byte an element, the bf16 output two.
        let (q_rows, kv_rows) = (8.0 * 2048.0 * 16.0, 8.0 * 2048.0 * 4.0);
        let bytes = q_rows * 128.0 + 2.0 * kv_rows * 128.0 + 2.0 * q_rows * 128.0;
        assert!((fp8.gbps.unwrap() - bytes / 0.5e-3 / 1e9).abs() < 1e-9);
        assert!((fp8.kv_gbps.unwrap() - bf16.kv_gbps.unwrap() / 2.0).abs() < 1e-9);
        assert_eq!((fp8.dtype.as_str(), fp8.kv_dtype.as_deref()), ("e4m3", Some("e4m3")));
        // An FP8 cache read by bf16 queries: GB/s as before, K+V GB/s at a byte.
        let cache = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").with_kv(Some(Fp8::E4m3)).timed(0.5, 0.4);
        assert_eq!((cache.gbps, cache.kv_gbps), (bf16.gbps, fp8.kv_gbps));
    }

    #[test]
    fn modifications_are_named_counted_and_default_when_absent() {
        let shape = Shape { batch: 1, heads_q: 2, heads_kv: 2, seqlen_q: 4096, seqlen_k: 4096, head_dim: 64, head_dim_v: None, causal: true };
        let window = ModSpec { window: (Some(1023), Some(0)), softcap: Some(30.0), ..ModSpec::default() };
        let plain = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").timed(1.0, 1.0);
        let local = Record::new(Implementation::Flashrs, shape, "bf16", "auto", "k").with_mods(window).timed(1.0, 1.0);
        // Row i sees min(i + 1, 1024) keys; plain causal rows count half the square.
        let ratio = local.tflops.unwrap() / plain.tflops.unwrap();
        assert!((ratio - (1024.0 * 1025.0 / 2.0 + 1024.0 * 3072.0) / (4096.0 * 4096.0 / 2.0)).abs() < 1e-12, "{ratio}");
        assert_eq!(local.label(), format!("{} [window 1023,0; softcap 30]", shape.label()));
        assert_eq!(plain.label(), shape.label());
        let v = serde_json::to_value(&local).unwrap();
        assert_eq!((&v["mods"], &serde_json::to_value(&plain).unwrap()["mods"]), (&"window 1023,0; softcap 30".into(), &"".into()));
        assert_eq!(serde_json::from_value::<Record>(v).unwrap(), local);
        // Files from before modifications existed have no "mods": plain rows.
        let mut old = serde_json::to_value(&plain).unwrap();
        old.as_object_mut().unwrap().remove("mods");
        assert_eq!(serde_json::from_value::<Record>(old).unwrap(), plain);
    }

    #[test]
    fn implementation_names_match_serde() {
        for i in Implementation::ALL {
            assert_eq!(serde_json::to_value(i).unwrap(), serde_json::Value::from(i.name()));
        }
    }
}
