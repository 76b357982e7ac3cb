//! `--window`, `--softcap`, `--alibi`, `--sinks` and `--block-sparsity`: the attention
//! modifications ([`flashrs::Mods`]) every row of a benchmark runs with, the values they take
//! on the GPU, the same values for the CPU reference, and the compact label records carry
//! (`window 4096,0; softcap 30; alibi; sinks; blocks 0.8`, empty for plain attention).

use std::fmt;
use std::str::FromStr;

use flashrs::sparse::BLOCK;
use flashrs::{AttentionParamsBuilder, Block, BlockMask, DeviceArray, HostBlockMask, KernelPath};
use flashrs_reference::{Blocks, Variants};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::sweep::Shape;

/// Seed of the sink logits' generator: every row, run and machine draws the same logits, so
/// runs stay comparable.
pub const SINK_SEED: u64 = 0x5EED_5EED;
/// Sink logits are drawn uniformly from `[-SINK_RANGE, SINK_RANGE]`: around the scores of
/// unit-variance inputs, so that the sinks take a visible share of each row's softmax.
pub const SINK_RANGE: f32 = 2.0;
/// Seed of the block masks' generator (see [`ModSpec::block_mask`]).
pub const BLOCK_SEED: u64 = 0xB10C_5EED;

/// A sliding window as FlashAttention's `window_size`: the keys a query row sees before
/// (`.0`) and after (`.1`) its diagonal, `None` for an unbounded side; `(None, None)` is no
/// window.
pub type Window = (Option<usize>, Option<usize>);

/// The modifications of a run, as the command line gives them. Records carry it, serialized as
/// its label ([`ModSpec::label`]), which reads back into the same value, so a report made from
/// a JSON file still knows each row's problem (and counts its FLOPs) exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct ModSpec {
    /// Sliding window.
    pub window: Window,
    /// Softcap on the scaled scores.
    pub softcap: Option<f32>,
    /// ALiBi, BLOOM's slopes ([`alibi_slopes`]).
    pub alibi: bool,
    /// Sinks, seeded logits ([`sink_logits`]).
    pub sinks: bool,
    /// Block sparsity: the fraction of key blocks each query block skips ([`ModSpec::block_mask`]).
    pub block_sparsity: Option<f32>,
}

impl ModSpec {
    /// True for plain attention.
    pub fn is_plain(&self) -> bool {
        *self == ModSpec::default()
    }

    /// True when a side of the window is bounded.
    pub fn has_window(&self) -> bool {
        self.window != (None, None)
    }

    /// The compact label: `window L,R` (-1 for an unbounded side), `softcap C`, `alibi`,
    /// `sinks`, joined by `; `; empty for plain attention.
    pub fn label(&self) -> String {
        let side = |s: Option<usize>| s.map_or("-1".to_string(), |n| n.to_string());
        let window = self.has_window().then(|| format!("window {},{}", side(self.window.0), side(self.window.1)));
        // f32's Display is the shortest text that parses back to the same value.
        let softcap = self.softcap.map(|c| format!("softcap {c}"));
        let flags = [self.alibi.then(|| "alibi".to_string()), self.sinks.then(|| "sinks".to_string())];
        let blocks = self.block_sparsity.map(|s| format!("blocks {s}"));
        [window, softcap].into_iter().chain(flags).chain([blocks]).flatten().collect::<Vec<_>>().join("; ")
    }

    /// Key blocks each query block of a row with `seqlen_k` keys visits under
    /// `--block-sparsity`: `round((1 - sparsity) * kv_blocks)`, at least 1.
    pub fn visited_blocks(&self, seqlen_k: usize) -> Option<usize> {
        let kv_blocks = seqlen_k.div_ceil(BLOCK).max(1);
        self.block_sparsity.map(|s| ((1.0 - f64::from(s)) * kv_blocks as f64).round().max(1.0) as usize)
    }

    /// The block mask of a row under `--block-sparsity`: every query block visits the same
    /// number of key blocks ([`ModSpec::visited_blocks`]), drawn at random (seeded with
    /// [`BLOCK_SEED`]) and shared by every batch entry and head, so that every CTA does the
    /// same work and the time can be set against the dense time times the density.
    pub fn block_mask(&self, seqlen_q: usize, seqlen_k: usize) -> Option<HostBlockMask> {
        let visited = self.visited_blocks(seqlen_k)?;
        let (q_blocks, kv_blocks) = (seqlen_q.div_ceil(BLOCK).max(1), seqlen_k.div_ceil(BLOCK).max(1));
        let mut rng = rand::rngs::StdRng::seed_from_u64(BLOCK_SEED);
        let chosen: Vec<Vec<bool>> = (0..q_blocks)
            .map(|_| {
                let mut order: Vec<usize> = (0..kv_blocks).collect();
                for i in (1..kv_blocks).rev() {
                    order.swap(i, rng.random_range(0..=i));
                }
                let mut row = vec![false; kv_blocks];
                order[..visited.min(kv_blocks)].iter().for_each(|&kb| row[kb] = true);
                row
            })
            .collect();
        HostBlockMask::from_fn(1, 1, seqlen_q, seqlen_k, |_, _, qb, kb| if chosen[qb][kb] { Block::Partial } else { Block::Skip }).ok()
    }

    /// `b` with the window and the softcap: the modifications that need no GPU memory (ALiBi
    /// and sinks borrow theirs, see [`with_arrays`]).
    pub fn scalars<'a>(&self, b: AttentionParamsBuilder<'a>) -> AttentionParamsBuilder<'a> {
        let b = if self.has_window() { b.window(self.window.0, self.window.1) } else { b };
        match self.softcap {
            Some(cap) => b.softcap(cap),
            None => b,
        }
    }

    /// Floating-point operations of `shape` under these modifications, by the library's
    /// convention: a window counts only the (query, key) pairs it lets through; a block mask
    /// the fraction of key blocks it visits.
    pub fn flops(&self, shape: &Shape) -> f64 {
        let dense = self.scalars(shape.params(KernelPath::Auto, None)).build().map_or(f64::NAN, |p| p.flops());
        match self.visited_blocks(shape.seqlen_k) {
            Some(n) => dense * n as f64 / shape.seqlen_k.div_ceil(BLOCK).max(1) as f64,
            None => dense,
        }
    }
}

impl fmt::Display for ModSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

impl FromStr for ModSpec {
    type Err = String;

    /// Reads a label back (see [`ModSpec::label`]); the empty string is plain attention.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut spec = ModSpec::default();
        for item in s.split(';').map(str::trim).filter(|x| !x.is_empty()) {
            match item.split_once(' ') {
                Some(("window", w)) => spec.window = parse_window(w)?,
                Some(("softcap", c)) => spec.softcap = Some(parse_softcap(c)?),
                None if item == "alibi" => spec.alibi = true,
                None if item == "sinks" => spec.sinks = true,
                Some(("blocks", s)) => spec.block_sparsity = Some(parse_sparsity(s)?),
                _ => return Err(format!("'{item}' is not an attention modification (window L,R; softcap C; alibi; sinks; blocks S)")),
            }
        }
        Ok(spec)
    }
}

impl From<ModSpec> for String {
    fn from(m: ModSpec) -> String {
        m.label()
    }
}

impl TryFrom<String> for ModSpec {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// Parses `--window LEFT,RIGHT`: each side a key count or -1 (unbounded), as FlashAttention's
/// `window_size`.
pub fn parse_window(s: &str) -> Result<Window, String> {
    let side = |x: &str, name: &str| match x.trim() {
        "-1" => Ok(None),
        x => x.parse::<usize>().map(Some).map_err(|_| format!("the {name} side '{x}' is neither a key count nor -1 (unbounded)")),
    };
    let (left, right) = s.split_once(',').ok_or_else(|| format!("'{s}' is not LEFT,RIGHT (key counts, -1 for an unbounded side; e.g. 4096,0)"))?;
    Ok((side(left, "left")?, side(right, "right")?))
}

/// Parses `--softcap CAP`: a finite positive number.
pub fn parse_softcap(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(cap) if cap.is_finite() && cap > 0.0 => Ok(cap),
        _ => Err(format!("'{s}' is not a positive softcap (e.g. 30 or 50.0)")),
    }
}

/// Parses `--block-sparsity S`: the fraction of key blocks skipped, in `[0, 1)`.
pub fn parse_sparsity(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(x) if (0.0..1.0).contains(&x) => Ok(x),
        _ => Err(format!("'{s}' is not a block sparsity in [0, 1) (e.g. 0.8: each query block skips 80% of the key blocks)")),
    }
}

/// BLOOM's ALiBi slopes, `2^(-8 (h + 1) / heads_q)` for query head `h`, as f32.
pub fn alibi_slopes(heads_q: usize) -> Vec<f32> {
    (0..heads_q).map(|h| (-8.0 * (h + 1) as f64 / heads_q as f64).exp2() as f32).collect()
}

/// One sink logit per query head, uniform in `[-SINK_RANGE, SINK_RANGE]` from a generator
/// seeded with [`SINK_SEED`].
pub fn sink_logits(heads_q: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(SINK_SEED);
    (0..heads_q).map(|_| rng.random_range(-SINK_RANGE..=SINK_RANGE)).collect()
}

/// `b` with ALiBi slopes (one per query head), sinks and a block mask on the GPU, where given.
pub fn with_arrays<'a>(
    b: AttentionParamsBuilder<'a>,
    slopes: Option<DeviceArray<'a, f32>>,
    sinks: Option<DeviceArray<'a, f32>>,
    blocks: Option<BlockMask<'a>>,
) -> AttentionParamsBuilder<'a> {
    let b = match slopes {
        Some(s) => b.alibi(s, false),
        None => b,
    };
    let b = match blocks {
        Some(m) => b.block_mask(m),
        None => b,
    };
    match sinks {
        Some(s) => b.sinks(s),
        None => b,
    }
}

/// A row's modifications with their values: the f32 arrays uploaded for it, and f64 copies of
/// exactly those values for the reference (so a mismatch is the kernel's, not a rounding of
/// the inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct RowMods {
    /// What the command line asked for.
    pub spec: ModSpec,
    /// ALiBi slopes, one per query head, as uploaded.
    pub slopes: Option<Vec<f32>>,
    /// Sink logits, one per query head, as uploaded.
    pub sinks: Option<Vec<f32>>,
    /// The block mask, as uploaded.
    pub blocks: Option<HostBlockMask>,
    /// The reference's copies of `slopes` and `sinks`.
    wide: [Option<Vec<f64>>; 2],
    /// The block mask's pairs for the reference.
    visits: Option<Vec<bool>>,
}

impl RowMods {
    /// The values of `spec` for a row of `heads_q` query heads, `seqlen_q` queries and
    /// `seqlen_k` keys.
    pub fn new(spec: ModSpec, heads_q: usize, seqlen_q: usize, seqlen_k: usize) -> Self {
        let slopes = spec.alibi.then(|| alibi_slopes(heads_q));
        let sinks = spec.sinks.then(|| sink_logits(heads_q));
        let widen = |v: &Option<Vec<f32>>| v.as_ref().map(|v| v.iter().map(|&x| f64::from(x)).collect());
        let blocks = spec.block_mask(seqlen_q, seqlen_k);
        let visits = blocks.as_ref().map(HostBlockMask::visits);
        RowMods { spec, wide: [widen(&slopes), widen(&sinks)], slopes, sinks, blocks, visits }
    }

    /// The reference's variants: the same window, cap, slopes, sinks and block mask as the GPU's.
    pub fn variants(&self) -> Variants<'_> {
        let blocks = match (&self.blocks, &self.visits) {
            (Some(m), Some(visits)) => Some(Blocks { visits, batch: 1, heads: 1, q_blocks: m.q_blocks, kv_blocks: m.kv_blocks }),
            _ => None,
        };
        Variants { window: self.spec.window, softcap: self.spec.softcap.map(f64::from), alibi: self.wide[0].as_deref(), sinks: self.wide[1].as_deref(), blocks, bias: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_back_and_plain_is_empty() {
        assert_eq!(ModSpec::default().label(), "");
        assert_eq!("".parse::<ModSpec>().unwrap(), ModSpec::default());
        let all = ModSpec { window: (Some(4096), Some(0)), softcap: Some(30.0), alibi: true, sinks: true, block_sparsity: Some(0.8) };
        assert_eq!(all.label(), "window 4096,0; softcap 30; alibi; sinks; blocks 0.8");
        let odd = ModSpec { window: (None, Some(7)), softcap: Some(0.1), ..ModSpec::default() };
        assert_eq!(odd.label(), "window -1,7; softcap 0.1");
        for m in [all, odd, ModSpec { sinks: true, ..ModSpec::default() }] {
            assert_eq!(m.label().parse::<ModSpec>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), serde_json::Value::from(m.label()));
            assert_eq!(serde_json::from_value::<ModSpec>(serde_json::Value::from(m.label())).unwrap(), m);
        }
        // (-1, -1) is FlashAttention's "no window": nothing to say.
        assert_eq!(ModSpec { window: (None, None), ..ModSpec::default() }.label(), "");
        assert!("dropout 0.1".parse::<ModSpec>().unwrap_err().contains("not an attention modification"));
    }

    #[test]
    fn window_and_softcap_values_are_checked() {
        assert_eq!(parse_window("128,-1"), Ok((Some(128), None)));
        assert_eq!(parse_window("-1,0"), Ok((None, Some(0))));
        assert_eq!(parse_window(" 4096 , 0 "), Ok((Some(4096), Some(0))));
        for bad in ["128", "-2,0", "1.5,0", "a,b", "4096,0,1", ""] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
        assert!(parse_window("-2,0").unwrap_err().contains("neither a key count nor -1"));
        assert_eq!(parse_softcap("30"), Ok(30.0));
        for bad in ["0", "-5", "inf", "NaN", "x"] {
            assert!(parse_softcap(bad).unwrap_err().contains("positive softcap"), "{bad}");
        }
    }

    #[test]
    fn slopes_are_blooms_and_sinks_are_seeded() {
        assert_eq!(alibi_slopes(8), [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]);
        let s = alibi_slopes(12);
        assert!((s[0] as f64 - 2f64.powf(-8.0 / 12.0)).abs() < 1e-7 && s[11] == 2f32.powi(-8));
        let sinks = sink_logits(16);
        assert_eq!(sinks, sink_logits(16), "the same logits every time");
        assert!(sinks.iter().all(|x| (-SINK_RANGE..=SINK_RANGE).contains(x)));
        assert!(sinks.windows(2).any(|w| w[0] != w[1]));
        // A row with more heads starts with the same logits.
        assert_eq!(sink_logits(4), sinks[..4]);
    }

    #[test]
    fn the_reference_gets_exactly_the_gpu_values() {
        let spec = ModSpec { window: (Some(3), None), softcap: Some(0.3), alibi: true, sinks: true, block_sparsity: None };
        let row = RowMods::new(spec, 6, 10, 10);
        let v = row.variants();
        assert_eq!(v.window, (Some(3), None));
        // The cap widened from the f32 the GPU gets, not 0.3 in f64.
        assert_eq!(v.softcap, Some(0.3f32 as f64));
        assert_ne!(v.softcap, Some(0.3));
        let widened = |x: &[f32]| x.iter().map(|&x| x as f64).collect::<Vec<_>>();
        assert_eq!(v.alibi.unwrap(), widened(row.slopes.as_ref().unwrap()));
        assert_eq!(v.sinks.unwrap(), widened(row.sinks.as_ref().unwrap()));
        let plain = RowMods::new(ModSpec::default(), 6, 10, 10);
        assert_eq!(plain.variants(), Variants::NONE);
    }

    #[test]
    fn block_masks_visit_the_same_count_everywhere_and_are_seeded() {
        let spec = ModSpec { block_sparsity: Some(0.8), ..ModSpec::default() };
        // 8k keys: 64 key blocks, 13 visited (round(12.8)) by each of 32 query blocks.
        assert_eq!(spec.visited_blocks(8192), Some(13));
        let m = spec.block_mask(4096, 8192).unwrap();
        assert_eq!((m.q_blocks, m.kv_blocks), (32, 64));
        assert!(m.counts.iter().all(|&c| c == 13) && m.full_counts.iter().all(|&c| c == 0));
        assert_eq!(m, spec.block_mask(4096, 8192).unwrap(), "the same mask every time");
        assert_ne!(m.indices[..64], m.indices[64..128], "query blocks draw their own blocks");
        assert!((m.density() - 13.0 / 64.0).abs() < 1e-12);
        // Always at least one block; the reference sees the same pairs.
        assert_eq!(ModSpec { block_sparsity: Some(0.99), ..spec }.visited_blocks(300), Some(1));
        let row = RowMods::new(spec, 2, 300, 700);
        let v = row.variants().blocks.unwrap();
        // One key block for each of the 3 query blocks.
        assert_eq!(v.visits.iter().filter(|&&x| x).count(), 3);
        assert_eq!(parse_sparsity("0.9"), Ok(0.9));
        for bad in ["1", "-0.1", "x", "NaN"] {
            assert!(parse_sparsity(bad).unwrap_err().contains("block sparsity"), "{bad}");
        }
    }

    #[test]
    fn a_window_counts_only_the_pairs_it_lets_through() {
        let s = Shape { batch: 2, heads_q: 4, heads_kv: 4, seqlen_q: 8, seqlen_k: 8, head_dim: 64, head_dim_v: None, causal: false };
        assert_eq!(ModSpec::default().flops(&s), s.flops());
        // Softcap, ALiBi and sinks change no matmul.
        assert_eq!(ModSpec { softcap: Some(5.0), alibi: true, sinks: true, ..ModSpec::default() }.flops(&s), s.flops());
        // Each of 8 rows sees its own key and the one before (the first row only its own): 15 pairs.
        let w = ModSpec { window: (Some(1), Some(0)), ..ModSpec::default() };
        assert_eq!(w.flops(&s), 4.0 * 2.0 * 4.0 * 15.0 * 64.0);
    }
}
