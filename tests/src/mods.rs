//! Attention modifications in test cases: what a case asks for on the host, its arrays on the
//! GPU, the call's builder with them, and the reference's [`Variants`] of the same values.
use cust::memory::DeviceBuffer;
use flashrs::{AttentionParamsBuilder, DeviceArray};
use flashrs_reference::Variants;

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
}

/// A case's modification arrays on the GPU.
pub struct ModBuffers {
    alibi: Option<DeviceBuffer<f32>>,
    sinks: Option<DeviceBuffer<f32>>,
}

/// The reference's copies (f64) of a case's arrays, which its [`Variants`] borrow.
pub struct RefMods {
    window: (Option<usize>, Option<usize>),
    softcap: Option<f64>,
    alibi: Option<Vec<f64>>,
    sinks: Option<Vec<f64>>,
}

impl RefMods {
    /// The reference's variants.
    pub fn variants(&self) -> Variants<'_> {
        Variants { window: self.window, softcap: self.softcap, alibi: self.alibi.as_deref(), sinks: self.sinks.as_deref() }
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
        ModBuffers { alibi: self.alibi.as_ref().map(|(s, _)| up(s)), sinks: self.sinks.as_deref().map(up) }
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
        RefMods { window: self.window, softcap: self.softcap.map(|c| c as f64), alibi, sinks: self.sinks.as_deref().map(f64s) }
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
        if parts.is_empty() { "plain".into() } else { parts.join(", ") }
    }
}
