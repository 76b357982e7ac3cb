//! Block-sparse attention: a block mask in FlexAttention's form says which key blocks each
//! query block computes, so that a call's time follows the blocks it visits, not the sequence.
//!
//! Blocks are [`BLOCK`] (128) rows by [`BLOCK`] keys. For each (batch entry, query head, query
//! block) a mask lists the key blocks to visit in two lists, *partial* blocks and then *full*
//! ones, each an i32 count per query block and i32 indices (`kv_blocks` entries per query
//! block, the first `count` used), as FlexAttention's `kv_num_blocks`/`kv_indices` and
//! `full_kv_num_blocks`/`full_kv_indices`. Visited blocks keep every element mask of the call
//! (causal masking, the sliding window, the sequence's end): the lists choose which blocks are
//! computed, the element masks which of their scores count. Whether a block is listed as
//! partial or full changes nothing in the result; both lists exist so that masks built for
//! FlexAttention pass as they are.
//!
//! [`BlockMask`] borrows the four arrays on the GPU, however they were built (on the host with
//! [`HostBlockMask`]'s helpers, on the GPU from a dense mask with
//! [`crate::Gpu::block_mask_from_dense`], or by the caller's own kernel); a call takes it through
//! [`crate::AttentionParamsBuilder::block_mask`]. The kernels clamp every count and index they
//! read (see [`flashrs_abi::BlockSparse`]; `kv_blocks` must cover the longest sequence's key
//! blocks), so no array content sends an access out of bounds; [`HostBlockMask::check`] names
//! what a host-built list gets wrong. A mask may be shared by every batch entry (`batch` 1) and
//! every head (`heads` 1). Block-sparse calls run on block-sparse kernels of both families
//! (the modification kernels' bodies over the lists), not with paged caches or split-KV. The
//! backward pass takes them on both families too (its kernels walk, per key block, the query
//! blocks that list it: the lists turned around on the GPU first, see
//! [`flashrs_abi::bwd::QueryLists`]; a key block listed twice for a query block counts once
//! there).
use flashrs_abi::BlockSparse;
use flashrs_abi::params::SPARSE_BLOCK;

use crate::error::Result;
use crate::layout::DeviceIndex;
use crate::validate::shape_err;

/// Rows of a query block and keys of a key block.
pub const BLOCK: usize = SPARSE_BLOCK as usize;

/// A block mask on the GPU (see the module docs): the partial blocks' counts
/// `[batch, heads, q_blocks]` and indices `[batch, heads, q_blocks, kv_blocks]`, and the full
/// blocks' likewise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockMask<'a> {
    /// Partial blocks per query block.
    pub counts: DeviceIndex<'a>,
    /// Partial blocks' key-block indices.
    pub indices: DeviceIndex<'a>,
    /// Full blocks per query block and their indices, if the mask has a full list.
    pub full: Option<(DeviceIndex<'a>, DeviceIndex<'a>)>,
    /// Batch entries the arrays cover: 1 (one mask for every entry) or the call's batch.
    pub batch: usize,
    /// Query heads the arrays cover: 1 (one mask for every head) or the call's `heads_q`.
    pub heads: usize,
    /// Query blocks per (batch entry, head): at least `ceil(seqlen_q / BLOCK)`.
    pub q_blocks: usize,
    /// Index entries per query block.
    pub kv_blocks: usize,
}

impl<'a> BlockMask<'a> {
    /// The arrays a launch reads, each with the i32 entries it needs and its name.
    pub(crate) fn arrays(&self) -> Result<Vec<(&'static str, DeviceIndex<'a>, usize)>> {
        let (rows, entries) = match list_sizes(self.batch, self.heads, self.q_blocks, self.kv_blocks) {
            // The kernels index entries in 32 bits.
            Some((r, e)) if e <= i32::MAX as usize => (r, e),
            _ => return Err(shape_err("block_mask", format!("{} x {} x {} x {} index entries exceed {}", self.batch, self.heads, self.q_blocks, self.kv_blocks, i32::MAX))),
        };
        let mut v = vec![("block_mask.counts", self.counts, rows), ("block_mask.indices", self.indices, entries)];
        if let Some((c, i)) = self.full {
            v.extend([("block_mask.full_counts", c, rows), ("block_mask.full_indices", i, entries)]);
        }
        Ok(v)
    }

    /// Checks the mask's shape against a call of `batch` entries, `heads_q` query heads and at
    /// most `seqlen_q` query rows and `seqlen_k` keys per sequence.
    pub(crate) fn check(&self, batch: usize, heads_q: usize, seqlen_q: usize, seqlen_k: usize) -> Result<()> {
        if self.batch != 1 && self.batch != batch {
            return Err(shape_err("block_mask", format!("covers {} batch entries: 1 or the call's {batch}", self.batch)));
        }
        if self.heads != 1 && self.heads != heads_q {
            return Err(shape_err("block_mask", format!("covers {} heads: 1 or the call's heads_q {heads_q}", self.heads)));
        }
        if self.q_blocks < seqlen_q.div_ceil(BLOCK) {
            return Err(shape_err("block_mask", format!("has {} query blocks, {seqlen_q} rows need {}", self.q_blocks, seqlen_q.div_ceil(BLOCK))));
        }
        // The kernels clamp indices to `kv_blocks`: past every key only if no sequence has more
        // blocks; and key positions (`kv_blocks * BLOCK`) stay within i32.
        let needed = blocks(seqlen_k);
        if self.kv_blocks < needed || self.kv_blocks > i32::MAX as usize / BLOCK {
            return Err(shape_err("block_mask", format!("kv_blocks {} must be from {needed} (the key blocks of {seqlen_k} keys) to {}", self.kv_blocks, i32::MAX as usize / BLOCK)));
        }
        self.arrays().map(|_| ())
    }

    /// What the kernels take.
    pub(crate) fn params(&self) -> BlockSparse {
        let (counts, indices) = (self.counts.buffer().ptr, self.indices.buffer().ptr);
        let (full_counts, full_indices) = self.full.map_or((0, 0), |(c, i)| (c.buffer().ptr, i.buffer().ptr));
        let head_stride = if self.heads == 1 { 0 } else { self.q_blocks };
        let batch_stride = if self.batch == 1 { 0 } else { self.heads * self.q_blocks };
        // `check` bounds every product by i32::MAX.
        BlockSparse {
            counts,
            indices,
            full_counts,
            full_indices,
            batch_stride: batch_stride as u32,
            head_stride: head_stride as u32,
            kv_blocks: self.kv_blocks as u32,
            _pad: 0,
        }
    }
}

/// Blocks of [`BLOCK`] covering `len` rows or keys: at least one, so that an empty sequence
/// still has its (empty) list.
pub(crate) fn blocks(len: usize) -> usize {
    len.div_ceil(BLOCK).max(1)
}

/// The count arrays' entries (`batch x heads x q_blocks`) and the index arrays'
/// (`x kv_blocks`) of a mask of these dimensions, unless the products overflow.
pub(crate) fn list_sizes(batch: usize, heads: usize, q_blocks: usize, kv_blocks: usize) -> Option<(usize, usize)> {
    let rows = batch.checked_mul(heads)?.checked_mul(q_blocks)?;
    Some((rows, rows.checked_mul(kv_blocks)?))
}

/// What a block mask does with one (query block, key block) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Not computed.
    Skip,
    /// Computed; some of its scores may be masked.
    Partial,
    /// Computed; all of its scores count (as far as the call's element masks allow).
    Full,
}

/// A block mask on the host, in the form [`BlockMask`] borrows once uploaded: build it with
/// [`HostBlockMask::from_fn`], [`HostBlockMask::from_dense`] or a pattern, upload
/// [`HostBlockMask::counts`] and the other arrays, and describe the uploads with
/// [`HostBlockMask::on_device`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostBlockMask {
    /// Batch entries covered (1: every entry).
    pub batch: usize,
    /// Query heads covered (1: every head).
    pub heads: usize,
    /// Query blocks per (batch entry, head).
    pub q_blocks: usize,
    /// Key blocks per query block (the index rows' length).
    pub kv_blocks: usize,
    /// Partial blocks per query block, `[batch, heads, q_blocks]`.
    pub counts: Vec<i32>,
    /// Partial blocks' indices, `[batch, heads, q_blocks, kv_blocks]`, ascending, unused
    /// entries 0.
    pub indices: Vec<i32>,
    /// Full blocks per query block.
    pub full_counts: Vec<i32>,
    /// Full blocks' indices.
    pub full_indices: Vec<i32>,
}

impl HostBlockMask {
    /// The mask that does `f(batch, head, q_block, kv_block)` with each pair, for `batch`
    /// entries and `heads` heads (1 for a mask shared by all) of `seqlen_q` queries and
    /// `seqlen_k` keys.
    pub fn from_fn(batch: usize, heads: usize, seqlen_q: usize, seqlen_k: usize, mut f: impl FnMut(usize, usize, usize, usize) -> Block) -> Result<Self> {
        let (q_blocks, kv_blocks) = (blocks(seqlen_q), blocks(seqlen_k));
        let Some((rows, entries)) = list_sizes(batch, heads, q_blocks, kv_blocks).filter(|&(_, e)| e <= i32::MAX as usize) else {
            return Err(shape_err("block_mask", format!("{batch} x {heads} x {q_blocks} x {kv_blocks} entries exceed {}", i32::MAX)));
        };
        if batch == 0 || heads == 0 {
            return Err(shape_err("block_mask", "batch and heads must be at least 1"));
        }
        let mut m = HostBlockMask {
            batch,
            heads,
            q_blocks,
            kv_blocks,
            counts: vec![0; rows],
            indices: vec![0; entries],
            full_counts: vec![0; rows],
            full_indices: vec![0; entries],
        };
        for row in 0..rows {
            let (b, h, qb) = (row / (heads * q_blocks), row / q_blocks % heads, row % q_blocks);
            for kb in 0..kv_blocks {
                let (count, list) = match f(b, h, qb, kb) {
                    Block::Skip => continue,
                    Block::Partial => (&mut m.counts[row], &mut m.indices),
                    Block::Full => (&mut m.full_counts[row], &mut m.full_indices),
                };
                list[row * kv_blocks + *count as usize] = kb as i32;
                *count += 1;
            }
        }
        Ok(m)
    }

    /// The block mask of a dense boolean mask `[batch, heads, seqlen_q, seqlen_k]` (true: the
    /// query row sees the key): a block with no true entry is skipped, one with only true
    /// entries (of the rows and keys that exist) is full, others partial. Partial blocks are
    /// computed whole but for the call's element masks, so the dense mask is exact where its
    /// partial blocks' false entries are ones causal masking or the window also mask.
    pub fn from_dense(dense: &[bool], batch: usize, heads: usize, seqlen_q: usize, seqlen_k: usize) -> Result<Self> {
        let n = [batch, heads, seqlen_q, seqlen_k].iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if n != Some(dense.len()) {
            return Err(shape_err("block_mask", format!("a dense mask of {} entries is not {batch} x {heads} x {seqlen_q} x {seqlen_k}", dense.len())));
        }
        HostBlockMask::from_fn(batch, heads, seqlen_q, seqlen_k, |b, h, qb, kb| {
            let base = (b * heads + h) * seqlen_q;
            let rows = qb * BLOCK..((qb + 1) * BLOCK).min(seqlen_q);
            let keys = kb * BLOCK..((kb + 1) * BLOCK).min(seqlen_k);
            let seen = rows.flat_map(|r| dense[(base + r) * seqlen_k..][keys.clone()].iter()).fold((0usize, 0usize), |(t, n), &x| (t + x as usize, n + 1));
            match seen {
                (0, _) => Block::Skip,
                (t, n) if t == n => Block::Full,
                _ => Block::Partial,
            }
        })
    }

    /// Causal masking aligned to the bottom-right corner, as blocks: blocks wholly below the
    /// diagonal full, blocks it crosses partial, the rest skipped. Shared by every batch entry
    /// and head.
    pub fn causal(seqlen_q: usize, seqlen_k: usize) -> Result<Self> {
        HostBlockMask::sliding_window(seqlen_q, seqlen_k, None, Some(0))
    }

    /// A sliding window (FlashAttention's `window_size`, see [`crate::mods::Window`]) as
    /// blocks: blocks wholly inside every row's window full, blocks partly inside partial.
    /// Shared by every batch entry and head.
    pub fn sliding_window(seqlen_q: usize, seqlen_k: usize, left: Option<usize>, right: Option<usize>) -> Result<Self> {
        let off = seqlen_k as i64 - seqlen_q as i64;
        // Row `r` sees keys `r + off - left ..= r + off + right`.
        let lo = |r: i64| left.map_or(i64::MIN / 4, |l| r + off - l as i64);
        let hi = |r: i64| right.map_or(i64::MAX / 4, |x| r + off + x as i64);
        HostBlockMask::from_fn(1, 1, seqlen_q, seqlen_k, |_, _, qb, kb| {
            let (r0, r1) = ((qb * BLOCK) as i64, (((qb + 1) * BLOCK).min(seqlen_q.max(1)) - 1) as i64);
            let (k0, k1) = ((kb * BLOCK) as i64, (((kb + 1) * BLOCK).min(seqlen_k.max(1)) - 1) as i64);
            if k1 < lo(r0) || k0 > hi(r1) {
                Block::Skip
            } else if k0 >= lo(r1) && k1 <= hi(r0) {
                Block::Full
            } else {
                Block::Partial
            }
        })
    }

    /// What the mask does with key block `kv_block` of query block `q_block` of (`batch`,
    /// `head`) (each below what the mask covers; a shared dimension takes any index).
    pub fn block(&self, batch: usize, head: usize, q_block: usize, kv_block: usize) -> Block {
        let row = (if self.batch == 1 { 0 } else { batch } * self.heads + if self.heads == 1 { 0 } else { head }) * self.q_blocks + q_block;
        let listed = |counts: &[i32], indices: &[i32]| indices[row * self.kv_blocks..][..counts[row] as usize].contains(&(kv_block as i32));
        if listed(&self.full_counts, &self.full_indices) {
            Block::Full
        } else if listed(&self.counts, &self.indices) {
            Block::Partial
        } else {
            Block::Skip
        }
    }

    /// For each (batch entry, head, query block, key block) the mask covers, in that order,
    /// whether the pair is computed: the form the CPU reference takes.
    pub fn visits(&self) -> Vec<bool> {
        let rows = self.batch * self.heads * self.q_blocks;
        (0..rows * self.kv_blocks)
            .map(|i| {
                let (row, kb) = (i / self.kv_blocks, i % self.kv_blocks);
                let (b, h, qb) = (row / (self.heads * self.q_blocks), row / self.q_blocks % self.heads, row % self.q_blocks);
                self.block(b, h, qb, kb) != Block::Skip
            })
            .collect()
    }

    /// The fraction of (query block, key block) pairs computed.
    pub fn density(&self) -> f64 {
        let visited: i64 = self.counts.iter().chain(&self.full_counts).map(|&c| c as i64).sum();
        visited as f64 / (self.counts.len() * self.kv_blocks) as f64
    }

    /// Checks the lists (their fields are public): array lengths that match the dimensions,
    /// counts within `0..=kv_blocks`, listed indices within `0..kv_blocks`, and no key block
    /// listed twice for one query block (its keys would count twice). The kernels clamp what
    /// they read whatever the content; this names what a mask built on the host got wrong.
    pub fn check(&self) -> Result<()> {
        let Some((rows, entries)) = list_sizes(self.batch, self.heads, self.q_blocks, self.kv_blocks) else {
            return Err(shape_err("block_mask", "dimensions overflow"));
        };
        for (name, len, want) in [("counts", self.counts.len(), rows), ("full_counts", self.full_counts.len(), rows), ("indices", self.indices.len(), entries), ("full_indices", self.full_indices.len(), entries)] {
            if len != want {
                return Err(shape_err("block_mask", format!("{name} has {len} entries, the dimensions {} x {} x {} x {} need {want}", self.batch, self.heads, self.q_blocks, self.kv_blocks)));
            }
        }
        let kv = self.kv_blocks;
        let mut seen = vec![usize::MAX; kv];
        for row in 0..rows {
            for (counts, indices) in [(&self.counts, &self.indices), (&self.full_counts, &self.full_indices)] {
                let n = counts[row];
                if n < 0 || n as usize > kv {
                    return Err(shape_err("block_mask", format!("query block row {row} lists {n} blocks, not 0 to {kv}")));
                }
                for &kb in &indices[row * kv..][..n as usize] {
                    if kb < 0 || kb as usize >= kv {
                        return Err(shape_err("block_mask", format!("query block row {row} lists key block {kb}, not 0 to {}", kv - 1)));
                    }
                    if std::mem::replace(&mut seen[kb as usize], row) == row {
                        return Err(shape_err("block_mask", format!("query block row {row} lists key block {kb} twice")));
                    }
                }
            }
        }
        Ok(())
    }

    /// The mask on the GPU, given where [`HostBlockMask::counts`], [`HostBlockMask::indices`],
    /// [`HostBlockMask::full_counts`] and [`HostBlockMask::full_indices`] were uploaded, once
    /// [`HostBlockMask::check`] passes.
    pub fn on_device<'a>(&self, counts: DeviceIndex<'a>, indices: DeviceIndex<'a>, full_counts: DeviceIndex<'a>, full_indices: DeviceIndex<'a>) -> Result<BlockMask<'a>> {
        self.check()?;
        Ok(BlockMask { counts, indices, full: Some((full_counts, full_indices)), batch: self.batch, heads: self.heads, q_blocks: self.q_blocks, kv_blocks: self.kv_blocks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn causal_blocks_are_full_below_the_diagonal_and_partial_on_it() {
        let m = HostBlockMask::causal(300, 300).unwrap();
        assert_eq!((m.q_blocks, m.kv_blocks), (3, 3));
        let row = |qb| (0..3).map(|kb| m.block(5, 7, qb, kb)).collect::<Vec<_>>();
        assert_eq!(row(0), [Block::Partial, Block::Skip, Block::Skip]);
        assert_eq!(row(1), [Block::Full, Block::Partial, Block::Skip]);
        assert_eq!(row(2), [Block::Full, Block::Full, Block::Partial]);
        assert!((m.density() - 6.0 / 9.0).abs() < 1e-12);
        // Bottom-right: 128 queries over 384 keys see every key block up to the last.
        let tail = HostBlockMask::causal(128, 384).unwrap();
        assert_eq!((0..3).map(|kb| tail.block(0, 0, 0, kb)).collect::<Vec<_>>(), [Block::Full, Block::Full, Block::Partial]);
    }

    #[test]
    fn dense_masks_become_blocks_and_agree_with_the_patterns() {
        let (sq, sk) = (200, 260);
        let window = |r: usize, k: usize| {
            let diag = r as i64 + sk as i64 - sq as i64;
            (k as i64) >= diag - 100 && (k as i64) <= diag
        };
        let dense: Vec<bool> = (0..sq).flat_map(|r| (0..sk).map(move |k| window(r, k))).collect();
        let from_dense = HostBlockMask::from_dense(&dense, 1, 1, sq, sk).unwrap();
        let pattern = HostBlockMask::sliding_window(sq, sk, Some(100), Some(0)).unwrap();
        for qb in 0..2 {
            for kb in 0..3 {
                assert_eq!(from_dense.block(0, 0, qb, kb), pattern.block(0, 0, qb, kb), "{qb} {kb}");
            }
        }
        assert!(HostBlockMask::from_dense(&dense[1..], 1, 1, sq, sk).is_err());
        let all = HostBlockMask::from_dense(&vec![true; 2 * 130 * 5], 2, 1, 130, 5).unwrap();
        assert_eq!((all.counts.as_slice(), all.full_counts.as_slice(), all.full_indices[1]), (&[0, 0, 0, 0][..], &[1, 1, 1, 1][..], 0));
    }

    #[test]
    fn per_head_lists_and_kernel_strides() {
        let m = HostBlockMask::from_fn(2, 3, 256, 384, |b, h, qb, kb| if (b + h + qb + kb) % 2 == 0 { Block::Partial } else { Block::Skip }).unwrap();
        assert_eq!(m.block(1, 2, 1, 0), Block::Partial);
        assert_eq!(m.block(1, 2, 1, 1), Block::Skip);
        let row = (3 + 2) * 2 + 1;
        assert_eq!((m.counts[row], &m.indices[row * 3..row * 3 + 2]), (2, &[0, 2][..]));
        let idx = unsafe { DeviceIndex::from_raw(0x1000, 1 << 20) };
        let d = m.on_device(idx, idx, idx, idx).unwrap();
        let p = d.params();
        assert_eq!((p.batch_stride, p.head_stride, p.kv_blocks), (6, 2, 3));
        // The kernels' row of (1, 2, 1) is the host's.
        assert_eq!(p.batch_stride + 2 * p.head_stride + 1, row as u32);
        assert!(d.check(2, 3, 256, 384).is_ok());
        assert!(d.check(4, 3, 256, 384).is_err());
        assert!(d.check(2, 6, 256, 384).is_err());
        assert!(d.check(2, 3, 257, 384).is_err());
        assert!(d.check(2, 3, 256, 385).is_err());
        assert!(d.check(2, 3, 256, 10).is_ok());
        let shared = HostBlockMask::causal(256, 256).unwrap().on_device(idx, idx, idx, idx).unwrap();
        assert_eq!((shared.params().batch_stride, shared.params().head_stride), (0, 0));
        assert!(shared.check(7, 5, 200, 200).is_ok());
    }

    #[test]
    fn hand_edited_lists_are_typed_errors() {
        let good = HostBlockMask::causal(300, 300).unwrap();
        assert!(good.check().is_ok());
        let idx = unsafe { DeviceIndex::from_raw(0x1000, 1 << 20) };
        let bad = |edit: &dyn Fn(&mut HostBlockMask), want: &str| {
            let mut m = good.clone();
            edit(&mut m);
            let e = m.on_device(idx, idx, idx, idx).unwrap_err();
            assert!(matches!(&e, Error::InvalidShape { what: "block_mask", reason } if reason.contains(want)), "{e:?}");
        };
        bad(&|m| m.indices[0] = -5, "key block -5");
        bad(&|m| m.full_indices[2 * 3] = 3, "key block 3");
        bad(&|m| m.counts[1] = 4, "lists 4 blocks");
        bad(&|m| m.full_counts[0] = -1, "lists -1 blocks");
        bad(&|m| m.indices.pop().map(drop).unwrap_or(()), "indices has 8 entries");
        // Query block 1 lists block 0 as full already: listing it as partial too counts it twice.
        bad(&|m| (m.counts[1], m.indices[3 + 1]) = (2, 0), "twice");
    }

    #[test]
    fn visits_follow_the_lists_in_mask_order() {
        let m = HostBlockMask::from_fn(2, 1, 256, 384, |b, _, qb, kb| if b == 1 && qb == kb { Block::Full } else { Block::Skip }).unwrap();
        let v = m.visits();
        assert_eq!(v.len(), 2 * 2 * 3);
        // Batch entry 0 visits nothing; entry 1 the diagonal blocks (0, 0) and (1, 1).
        assert_eq!(v.iter().enumerate().filter(|(_, x)| **x).map(|(i, _)| i).collect::<Vec<_>>(), [6, 10]);
    }
}
