//! Attention modifications in test cases: what a case asks for on the host, its arrays on the
//! GPU, the call's builder with them, and the reference's [`Variants`] of the same values.
use cust::memory::DeviceBuffer;
use flashrs::{AttentionParamsBuilder, Block, DeviceArray, HostBlockMask};
use flashrs_reference::{Blocks, Variants};

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
}

/// A case's modification arrays on the GPU.
pub struct ModBuffers {
    alibi: Option<DeviceBuffer<f32>>,
    sinks: Option<DeviceBuffer<f32>>,
    /// The block mask's counts, indices, full counts and full indices.
    blocks: Option<[DeviceBuffer<i32>; 4]>,
}

/// The reference's copies (f64) of a case's arrays, which its [`Variants`] borrow.
pub struct RefMods {
    window: (Option<usize>, Option<usize>),
    softcap: Option<f64>,
    alibi: Option<Vec<f64>>,
    sinks: Option<Vec<f64>>,
    /// The block mask's pairs, `[batch, heads, q_blocks, kv_blocks]`, and those dimensions.
    blocks: Option<(Vec<bool>, [usize; 4])>,
}

impl RefMods {
    /// The reference's variants.
    pub fn variants(&self) -> Variants<'_> {
        let blocks = self.blocks.as_ref().map(|(visits, [batch, heads, q_blocks, kv_blocks])| Blocks {
            visits,
            batch: *batch,
            heads: *heads,
            q_blocks: *q_blocks,
            kv_blocks: *kv_blocks,
        });
        Variants { window: self.window, softcap: self.softcap, alibi: self.alibi.as_deref(), sinks: self.sinks.as_deref(), blocks }
    }
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

impl HostMods {
    /// True when nothing is set.
    pub fn is_plain(&self) -> bool {
        *self == HostMods::default()
    }

    /// The arrays, uploaded.
    pub fn upload(&self) -> ModBuffers {
        let up = |v: &[f32]| DeviceBuffer::from_slice(v).unwrap();
        let up_i32 = |v: &[i32]| DeviceBuffer::from_slice(if v.is_empty() { &[0][..] } else { v }).unwrap();
        let blocks = self.blocks.as_ref().map(|m| [up_i32(&m.counts), up_i32(&m.indices), up_i32(&m.full_counts), up_i32(&m.full_indices)]);
        ModBuffers { alibi: self.alibi.as_ref().map(|(s, _)| up(s)), sinks: self.sinks.as_deref().map(up), blocks }
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
            // As a mask built on the GPU: unchecked, so that hostile lists reach the kernels.
            (Some(m), Some([c, i, fc, fi])) => b.block_mask(flashrs::BlockMask {
                counts: DeviceArray::new(c),
                indices: DeviceArray::new(i),
                full: Some((DeviceArray::new(fc), DeviceArray::new(fi))),
                batch: m.batch,
                heads: m.heads,
                q_blocks: m.q_blocks,
                kv_blocks: m.kv_blocks,
            }),
            _ => b,
        };
        match &bufs.sinks {
            Some(d) => b.sinks(DeviceArray::new(d)),
            None => b,
        }
    }

    /// The reference's copies for a whole call (`batch: None`), or for batch entry `b` of it run
    /// alone as a batch of one (its own slopes where they are per batch entry).
    pub fn reference(&self, heads_q: usize, batch: Option<usize>) -> RefMods {
        let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let alibi = self.alibi.as_ref().map(|(s, per_batch)| match (batch, per_batch) {
            (Some(b), true) => f64s(&s[b * heads_q..(b + 1) * heads_q]),
            _ => f64s(s),
        });
        // The pairs as the mask states them (for one batch entry: its own, where per entry).
        let blocks = self.blocks.as_ref().map(|m| {
            let all = m.visits();
            let per_entry = m.heads * m.q_blocks * m.kv_blocks;
            match batch {
                Some(b) if m.batch > 1 => (all[b * per_entry..][..per_entry].to_vec(), [1, m.heads, m.q_blocks, m.kv_blocks]),
                _ => (all, [m.batch, m.heads, m.q_blocks, m.kv_blocks]),
            }
        });
        RefMods { window: self.window, softcap: self.softcap.map(|c| c as f64), alibi, sinks: self.sinks.as_deref().map(f64s), blocks }
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
        if parts.is_empty() { "plain".into() } else { parts.join(", ") }
    }
}
