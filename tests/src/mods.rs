//! Attention modifications in test cases: what a case asks for on the host, its arrays on the
//! GPU, the call's builder with them, and the reference's [`Variants`] of the same values.
use cust::memory::DeviceBuffer;
use flashrs::{AttentionParamsBuilder, Block, DeviceArray, HostBlockMask};
use flashrs_reference::{Bias, Blocks, Variants};

/// A case's modifications, on the host (see [`flashrs::mods`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostMods {
    /// Sliding window (left, right).
    pub window: (Option<usize>, Option<usize>),
    /// Softcap.
    pub softcap: Option<f32>,
    /// ALiBi slopes and whether they are `[batch, heads_q]` (else `[heads_q]`).
    pub alibi: Option<(Vec<f32>, bool)>,
    /// Sink logits, `[heads_q]`.
    pub sinks: Option<Vec<f32>>,
    /// Block mask.
    pub blocks: Option<HostBlockMask>,
    /// A learned relative-position bias, for custom kernels that read it as user data.
    pub bias: Option<RelativeBias>,
}

/// A learned relative-position bias as the `relative_bias` example's kernels read it (see its
/// device crate): per query head, one value per relative position `key - diag` in `-max..=max`,
/// farther positions clamped; on the GPU spread over every position within `radius`.
#[derive(Clone, Debug, PartialEq)]
pub struct RelativeBias {
    /// Positions with their own values.
    pub max: usize,
    /// The spread table's reach: at least the longest sequence plus 256.
    pub radius: usize,
    /// `[heads_q, 2 max + 1]`, in units of the scaled scores.
    pub learned: Vec<f32>,
}

/// The `relative_bias` example's kernels for this GPU, from `target/ptx/relative_bias_kernels`
/// or the folder `FLASHRS_CUSTOM_PTX_DIR` names; a failure saying how to build them where they
/// are missing (a GPU run of the tests must cover them).
pub fn relative_bias_kernels(gpu: &flashrs::Gpu) -> flashrs::CustomKernels<'_> {
    let module = if gpu.arch() == flashrs::Arch::Sm90a { "sm_90a" } else { "sm_80" };
    let dir = std::env::var("FLASHRS_CUSTOM_PTX_DIR").unwrap_or_else(|_| format!("{}/../target/ptx/relative_bias_kernels", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{dir}/{module}.ptx");
    let ptx = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}: run `cargo xtask build-ptx --crate host/examples/relative_bias_kernels`"));
    gpu.load_custom_kernels(&ptx).unwrap()
}

/// A random learned bias of `heads` heads reaching `max` positions, spread for sequences of up
/// to `longest` rows.
pub fn random_bias(heads: usize, max: usize, longest: usize, rng: &mut impl rand::Rng) -> RelativeBias {
    let learned = (0..heads * (2 * max + 1)).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    RelativeBias { max, radius: longest + 256, learned }
}

impl RelativeBias {
    /// The bias of query head `head` at a relative position.
    pub fn at(&self, head: usize, relative: i64) -> f32 {
        let m = self.max as i64;
        self.learned[head * (2 * self.max + 1) + (relative.clamp(-m, m) + m) as usize]
    }

    /// The user data: `radius`, then each head's bias at `-radius..=radius`.
    pub fn data(&self) -> Vec<f32> {
        let heads = self.learned.len() / (2 * self.max + 1);
        let r = self.radius as i64;
        let spread = (0..heads).flat_map(|h| (-r..=r).map(move |rel| self.at(h, rel)));
        std::iter::once(self.radius as f32).chain(spread).collect()
    }
}

/// A case's modification arrays on the GPU.
pub struct ModBuffers {
    alibi: Option<DeviceBuffer<f32>>,
    sinks: Option<DeviceBuffer<f32>>,
    /// The block mask's counts, indices, full counts and full indices.
    blocks: Option<[DeviceBuffer<i32>; 4]>,
    /// The relative bias's user data.
    user: Option<DeviceBuffer<f32>>,
}

/// The reference's copies (f64) of a case's arrays, which its [`Variants`] borrow.
pub struct RefMods {
    window: (Option<usize>, Option<usize>),
    softcap: Option<f64>,
    alibi: Option<Vec<f64>>,
    sinks: Option<Vec<f64>>,
    /// The block mask's pairs, `[batch, heads, q_blocks, kv_blocks]`, and those dimensions.
    blocks: Option<(Vec<bool>, [usize; 4])>,
    /// The relative bias, as a function of (batch entry, head, row, key) within sequences of
    /// `seqlen_k - seqlen_q` as the diagonal's offset.
    bias: Option<Box<dyn Fn(usize, usize, usize, usize) -> f64 + Sync>>,
}

impl RefMods {
    /// The reference's variants.
    pub fn variants(&self) -> Variants<'_> {
        let blocks = self.blocks.as_ref().map(blocks_of);
        let bias = self.bias.as_deref().map(Bias);
        Variants { window: self.window, softcap: self.softcap, alibi: self.alibi.as_deref(), sinks: self.sinks.as_deref(), blocks, bias }
    }
}

/// The pairs a block mask visits, `[batch, heads, q_blocks, kv_blocks]`, with those dimensions,
/// for the reference's [`Blocks`]: for a whole call (`batch: None`), or for batch entry `b` run
/// alone (its own pairs, where the mask has some per entry).
pub fn ref_blocks(m: &HostBlockMask, batch: Option<usize>) -> (Vec<bool>, [usize; 4]) {
    let all = m.visits();
    let per_entry = m.heads * m.q_blocks * m.kv_blocks;
    match batch {
        Some(b) if m.batch > 1 => (all[b * per_entry..][..per_entry].to_vec(), [1, m.heads, m.q_blocks, m.kv_blocks]),
        _ => (all, [m.batch, m.heads, m.q_blocks, m.kv_blocks]),
    }
}

/// The reference's [`Blocks`] of [`ref_blocks`]' pairs.
pub fn blocks_of((visits, [batch, heads, q_blocks, kv_blocks]): &(Vec<bool>, [usize; 4])) -> Blocks<'_> {
    Blocks { visits, batch: *batch, heads: *heads, q_blocks: *q_blocks, kv_blocks: *kv_blocks }
}

/// The host builder's lists of a byte mask as the GPU builder takes it (`[batch, heads,
/// seqlen_q, seqlen_k]`, nonzero where the row sees the key).
pub fn host_lists(dense: &[u8], batch: usize, heads: usize, seqlen_q: usize, seqlen_k: usize) -> HostBlockMask {
    HostBlockMask::from_dense(&dense.iter().map(|&x| x != 0).collect::<Vec<_>>(), batch, heads, seqlen_q, seqlen_k).unwrap()
}

/// A random block mask of `batch` entries and `heads` heads (1: shared) over `seqlen_q` x
/// `seqlen_k`, each pair visited with probability `density`, half of those listed full.
pub fn random_blocks(batch: usize, heads: usize, seqlen_q: usize, seqlen_k: usize, density: f64, rng: &mut impl rand::Rng) -> HostBlockMask {
    HostBlockMask::from_fn(batch, heads, seqlen_q, seqlen_k, |_, _, _, _| match rng.random::<f64>() {
        x if x >= density => Block::Skip,
        x if x < density / 2.0 => Block::Full,
        _ => Block::Partial,
    })
    .unwrap()
}

/// A block mask's four lists on the GPU (counts, indices, full counts, full indices).
pub fn upload_lists(m: &HostBlockMask) -> [DeviceBuffer<i32>; 4] {
    let up = |v: &[i32]| DeviceBuffer::from_slice(if v.is_empty() { &[0][..] } else { v }).unwrap();
    [up(&m.counts), up(&m.indices), up(&m.full_counts), up(&m.full_indices)]
}

/// `m` on the GPU as [`upload_lists`] put it, passed as a mask built on the GPU: unchecked, so
/// that hostile lists reach the kernels.
pub fn device_mask<'a>(m: &HostBlockMask, [c, i, fc, fi]: &'a [DeviceBuffer<i32>; 4]) -> flashrs::BlockMask<'a> {
    flashrs::BlockMask {
        counts: DeviceArray::new(c),
        indices: DeviceArray::new(i),
        full: Some((DeviceArray::new(fc), DeviceArray::new(fi))),
        batch: m.batch,
        heads: m.heads,
        q_blocks: m.q_blocks,
        kv_blocks: m.kv_blocks,
    }
}

impl HostMods {
    /// True when nothing is set.
    pub fn is_plain(&self) -> bool {
        *self == HostMods::default()
    }

    /// The arrays, uploaded.
    pub fn upload(&self) -> ModBuffers {
        let up = |v: &[f32]| DeviceBuffer::from_slice(v).unwrap();
        let blocks = self.blocks.as_ref().map(upload_lists);
        let user = self.bias.as_ref().map(|b| up(&b.data()));
        ModBuffers { alibi: self.alibi.as_ref().map(|(s, _)| up(s)), sinks: self.sinks.as_deref().map(up), blocks, user }
    }

    /// `b` with these modifications, reading the arrays from `bufs` (this case's upload).
    pub fn apply<'a>(&self, b: AttentionParamsBuilder<'a>, bufs: &'a ModBuffers) -> AttentionParamsBuilder<'a> {
        let b = if self.window != (None, None) { b.window(self.window.0, self.window.1) } else { b };
        let b = match self.softcap {
            Some(cap) => b.softcap(cap),
            None => b,
        };
        let b = match (&self.alibi, &bufs.alibi) {
            (Some((_, per_batch)), Some(d)) => b.alibi(DeviceArray::new(d), *per_batch),
            _ => b,
        };
        let b = match (&self.blocks, &bufs.blocks) {
            (Some(m), Some(lists)) => b.block_mask(device_mask(m, lists)),
            _ => b,
        };
        let b = match &bufs.user {
            Some(d) => b.user_data(DeviceArray::new(d)),
            None => b,
        };
        match &bufs.sinks {
            Some(d) => b.sinks(DeviceArray::new(d)),
            None => b,
        }
    }

    /// The reference's copies for a whole call (`batch: None`), or for batch entry `b` of it run
    /// alone as a batch of one (its own slopes where they are per batch entry).
    /// `offset` is the call's `seqlen_k - seqlen_q` (the relative bias's diagonal).
    pub fn reference(&self, heads_q: usize, batch: Option<usize>, offset: i64) -> RefMods {
        let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let alibi = self.alibi.as_ref().map(|(s, per_batch)| match (batch, per_batch) {
            (Some(b), true) => f64s(&s[b * heads_q..(b + 1) * heads_q]),
            _ => f64s(s),
        });
        let blocks = self.blocks.as_ref().map(|m| ref_blocks(m, batch));
        let bias = self.bias.clone().map(|b| {
            Box::new(move |_: usize, head: usize, row: usize, key: usize| b.at(head, key as i64 - row as i64 - offset) as f64) as Box<dyn Fn(usize, usize, usize, usize) -> f64 + Sync>
        });
        RefMods { window: self.window, softcap: self.softcap.map(|c| c as f64), alibi, sinks: self.sinks.as_deref().map(f64s), blocks, bias }
    }

    /// A short description for case lines.
    pub fn label(&self) -> String {
        let mut parts = vec![];
        if self.window != (None, None) {
            parts.push(format!("window {:?}/{:?}", self.window.0, self.window.1));
        }
        if let Some(c) = self.softcap {
            parts.push(format!("softcap {c}"));
        }
        if let Some((_, per_batch)) = &self.alibi {
            parts.push(format!("alibi{}", if *per_batch { " per batch" } else { "" }));
        }
        if self.sinks.is_some() {
            parts.push("sinks".into());
        }
        if let Some(m) = &self.blocks {
            parts.push(format!("blocks {:.0}% ({}x{})", 100.0 * m.density(), m.batch, m.heads));
        }
        if let Some(b) = &self.bias {
            parts.push(format!("relative bias ±{}", b.max));
        }
        if parts.is_empty() { "plain".into() } else { parts.join(", ") }
    }
}
