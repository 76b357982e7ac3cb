//! Block masks built on the GPU from a dense boolean mask: the device-side twin of
//! [`HostBlockMask::from_dense`], for masks a model computes on the GPU (document boundaries of
//! packed sequences, prefix-LM masks, masks learned or sampled per step) or too large to carry
//! through host memory.
//!
//! The dense mask is `[batch, heads, seqlen_q, seqlen_k]` bytes, nonzero where the query row sees
//! the key ([`DenseMaskShape`]); [`Gpu::block_mask_from_dense`] writes both lists of the
//! [`BlockMask`] it returns, exactly as [`HostBlockMask::from_dense`] would build them (each list
//! ascending, unused entries 0), in one kernel launch, without a host round trip. The mask reads
//! `seqlen_q x seqlen_k` bytes per (batch entry, head): O(S^2) memory, which only the caller's
//! mask occupies; attention itself never materialises one.
//!
//! [`HostBlockMask::from_dense`]: crate::HostBlockMask::from_dense
use std::ffi::c_void;

use flashrs_abi::DenseBlockMask;
use flashrs_abi::params::DENSE_BLOCK_MASK_THREADS;

use crate::buffers::BufferRef;
use crate::device::Gpu;
use crate::error::{Error, Result};
use crate::layout::{ArraySource, DeviceArray};
use crate::memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};
use crate::sparse::{BlockMask, blocks, list_sizes};
use crate::validate::{check_i32, shape_err};

/// The entry point of the device crate that builds the lists.
const KERNEL: &str = "block_mask_from_dense";

/// The dimensions of a dense boolean mask `[batch, heads, seqlen_q, seqlen_k]` and of the block
/// mask built from it: `q_blocks` and `kv_blocks` of [`BLOCK`](crate::sparse::BLOCK) rows and keys (at least 1 each),
/// as [`crate::HostBlockMask::from_dense`] has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseMaskShape {
    batch: usize,
    heads: usize,
    seqlen_q: usize,
    seqlen_k: usize,
}

impl DenseMaskShape {
    /// The shape of a mask of `batch` entries (1: one mask for every entry) and `heads` heads
    /// (1: one for every head), of `seqlen_q` query rows and `seqlen_k` keys. Refuses an
    /// empty batch or head count, lengths past `i32::MAX`, and list or mask sizes the kernels
    /// cannot index.
    pub fn new(batch: usize, heads: usize, seqlen_q: usize, seqlen_k: usize) -> Result<Self> {
        if batch == 0 || heads == 0 {
            return Err(shape_err("block_mask", "batch and heads must be at least 1"));
        }
        let shape = DenseMaskShape { batch, heads, seqlen_q, seqlen_k };
        let (rows, entries) = list_sizes(batch, heads, shape.q_blocks(), shape.kv_blocks()).unwrap_or((usize::MAX, usize::MAX));
        let bytes = [batch, heads, seqlen_q, seqlen_k].iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if seqlen_q > i32::MAX as usize || seqlen_k > i32::MAX as usize || rows > i32::MAX as usize || entries > i32::MAX as usize || bytes.is_none() {
            return Err(shape_err("block_mask", format!("a dense mask of {batch} x {heads} x {seqlen_q} x {seqlen_k} is past what the kernels index")));
        }
        Ok(shape)
    }

    /// Query blocks per (batch entry, head).
    pub fn q_blocks(&self) -> usize {
        blocks(self.seqlen_q)
    }

    /// Key blocks, and index entries per query block.
    pub fn kv_blocks(&self) -> usize {
        blocks(self.seqlen_k)
    }

    /// Entries of each count array, `batch x heads x q_blocks`.
    pub fn counts_len(&self) -> usize {
        self.batch * self.heads * self.q_blocks()
    }

    /// Entries of each index array, `counts_len() x kv_blocks`.
    pub fn indices_len(&self) -> usize {
        self.counts_len() * self.kv_blocks()
    }

    /// Bytes of the dense mask.
    pub fn dense_len(&self) -> usize {
        self.batch * self.heads * self.seqlen_q * self.seqlen_k
    }

    /// Checks the buffers of a build (the dense mask; counts, indices, full counts, full
    /// indices) and returns the kernel's parameters.
    pub fn plan(&self, dense: BufferRef, [counts, indices, full_counts, full_indices]: [BufferRef; 4]) -> Result<DenseBlockMask> {
        let (rows, entries) = (self.counts_len(), self.indices_len());
        let outs = [
            check_i32("block_mask.counts", counts, rows)?,
            check_i32("block_mask.indices", indices, entries)?,
            check_i32("block_mask.full_counts", full_counts, rows)?,
            check_i32("block_mask.full_indices", full_indices, entries)?,
        ];
        let bytes = self.dense_len();
        if bytes > 0 && dense.ptr == 0 {
            return Err(Error::InvalidBuffer { tensor: "dense", reason: "null address".into() });
        }
        if dense.len < bytes {
            return Err(Error::BufferTooSmall { tensor: "dense", needed: bytes as u64, len: dense.len as u64 });
        }
        let dense_span = ("dense", dense.ptr, dense.ptr.checked_add(bytes as u64).ok_or_else(|| Error::InvalidBuffer { tensor: "dense", reason: "addresses overflow 64 bits".into() })?);
        for (i, &(name, a0, a1)) in outs.iter().enumerate() {
            let others = outs[i + 1..].iter().copied().chain([dense_span]);
            if let Some((other, ..)) = others.into_iter().find(|&(_, b0, b1)| b0 < b1 && a0 < b1 && b0 < a1) {
                return Err(Error::InvalidBuffer { tensor: name, reason: format!("overlaps {other}") });
            }
        }
        // `new` bounds every length by i32::MAX.
        Ok(DenseBlockMask {
            dense: dense.ptr,
            counts: counts.ptr,
            indices: indices.ptr,
            full_counts: full_counts.ptr,
            full_indices: full_indices.ptr,
            seqlen_q: self.seqlen_q as u32,
            seqlen_k: self.seqlen_k as u32,
            q_blocks: self.q_blocks() as u32,
            kv_blocks: self.kv_blocks() as u32,
        })
    }

    /// The mask the lists describe, once written.
    fn mask<'a>(&self, counts: DeviceArray<'a, i32>, indices: DeviceArray<'a, i32>, full_counts: DeviceArray<'a, i32>, full_indices: DeviceArray<'a, i32>) -> BlockMask<'a> {
        BlockMask { counts, indices, full: Some((full_counts, full_indices)), batch: self.batch, heads: self.heads, q_blocks: self.q_blocks(), kv_blocks: self.kv_blocks() }
    }
}

impl Gpu {
    /// Builds on the GPU, queued on `stream`, the block mask of the dense boolean mask `dense`
    /// (`shape`'s bytes, nonzero where the query row sees the key): a block of [`BLOCK`](crate::sparse::BLOCK) rows and
    /// keys with no set byte is skipped, one with every byte set (of the rows and keys that
    /// exist) full, others partial, as [`crate::HostBlockMask::from_dense`] decides. The lists
    /// land in `counts` and `full_counts` ([`DenseMaskShape::counts_len`] entries each) and
    /// `indices` and `full_indices` ([`DenseMaskShape::indices_len`]); the returned
    /// [`BlockMask`] borrows them for calls that use it
    /// ([`crate::AttentionParamsBuilder::block_mask`]). The lists are written on `stream`: a
    /// call queued there after this one reads them complete; one on another stream must wait
    /// for this one (with cudarc's slices the typed entry points order it through their
    /// events).
    ///
    /// Returns a typed error without launching anything (every buffer untouched) for arrays
    /// too short or misaligned, a null or short `dense`, or arrays that overlap each other or
    /// `dense`.
    #[allow(clippy::too_many_arguments)]
    pub fn block_mask_from_dense<'a, S, D, C>(
        &self,
        stream: &S,
        dense: &D,
        shape: DenseMaskShape,
        counts: &'a mut C,
        indices: &'a mut C,
        full_counts: &'a mut C,
        full_indices: &'a mut C,
    ) -> Result<BlockMask<'a>>
    where
        S: LaunchStream + ?Sized,
        D: DeviceRead<u8, S> + ?Sized,
        C: DeviceWrite<i32, S> + ArraySource<i32> + ?Sized,
    {
        self.make_current()?;
        self.check_stream(stream.raw())?;
        {
            let mut g = Guards::default();
            let src = dense.read(stream, &mut g);
            let outs = [counts.write(stream, &mut g), indices.write(stream, &mut g), full_counts.write(stream, &mut g), full_indices.write(stream, &mut g)];
            let params = shape.plan(src, outs)?;
            // SAFETY: `plan` checked every address against these borrowed buffers; the stream is
            // this context's.
            unsafe { self.launch_dense_block_mask(stream.raw(), shape, params)? };
        }
        let (counts, indices, full_counts, full_indices): (&'a C, &'a C, &'a C, &'a C) = (counts, indices, full_counts, full_indices);
        Ok(shape.mask(DeviceArray::new(counts), DeviceArray::new(indices), DeviceArray::new(full_counts), DeviceArray::new(full_indices)))
    }

    /// [`Gpu::block_mask_from_dense`] on raw device addresses and a raw `CUstream`: `dense` the
    /// mask (bytes), `lists` the counts, indices, full counts and full indices (i32 entries), each
    /// as an address and a capacity.
    ///
    /// # Safety
    /// True capacities of live allocations usable in this GPU's context, nothing else touching
    /// the lists or writing the mask until the stream has passed the kernel, and `stream` null or
    /// a live stream of this context.
    pub unsafe fn block_mask_from_dense_raw(&self, stream: *mut c_void, dense: BufferRef, shape: DenseMaskShape, lists: [BufferRef; 4]) -> Result<()> {
        self.make_current()?;
        let params = shape.plan(dense, lists)?;
        self.check_stream(stream)?;
        // SAFETY: per this function's contract.
        unsafe { self.launch_dense_block_mask(stream, shape, params) }
    }

    /// Queues the kernel: a CTA per (batch entry, head, query block).
    ///
    /// # Safety
    /// `params` from [`DenseMaskShape::plan`] on live buffers; a valid stream of this context,
    /// current.
    unsafe fn launch_dense_block_mask(&self, stream: *mut c_void, shape: DenseMaskShape, mut params: DenseBlockMask) -> Result<()> {
        let func = self.raw_function(KERNEL)?;
        let mut args = [&mut params as *mut DenseBlockMask as *mut c_void];
        let d = self.driver;
        // SAFETY: one by-value `DenseBlockMask`, as the kernel takes; `counts_len` is at most
        // i32::MAX CTAs (`DenseMaskShape::new`).
        let r = unsafe { (d.launch_kernel)(func, shape.counts_len() as u32, 1, 1, DENSE_BLOCK_MASK_THREADS, 1, 1, 0, stream, args.as_mut_ptr(), std::ptr::null_mut()) };
        d.check("cuLaunchKernel", r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn lists(at: u64, rows: usize, entries: usize) -> [BufferRef; 4] {
        [BufferRef::new(at, rows), BufferRef::new(at + MB, entries), BufferRef::new(at + 2 * MB, rows), BufferRef::new(at + 3 * MB, entries)]
    }

    #[test]
    fn shapes_size_the_lists_as_the_host_builder() {
        let s = DenseMaskShape::new(2, 3, 300, 129).unwrap();
        assert_eq!((s.q_blocks(), s.kv_blocks(), s.counts_len(), s.indices_len(), s.dense_len()), (3, 2, 18, 36, 2 * 3 * 300 * 129));
        let host = crate::HostBlockMask::from_dense(&vec![true; s.dense_len()], 2, 3, 300, 129).unwrap();
        assert_eq!((host.counts.len(), host.indices.len()), (s.counts_len(), s.indices_len()));
        let empty = DenseMaskShape::new(1, 1, 0, 0).unwrap();
        assert_eq!((empty.q_blocks(), empty.kv_blocks(), empty.dense_len()), (1, 1, 0));
        for (b, h, q, k) in [(0, 1, 8, 8), (1, 0, 8, 8), (1, 1, 1 << 31, 8), (1 << 20, 1 << 20, 1 << 14, 128)] {
            assert!(matches!(DenseMaskShape::new(b, h, q, k), Err(Error::InvalidShape { what: "block_mask", .. })), "{b} {h} {q} {k}");
        }
    }

    #[test]
    fn plans_check_every_buffer() {
        let s = DenseMaskShape::new(1, 2, 200, 300).unwrap();
        let (rows, entries) = (s.counts_len(), s.indices_len());
        let dense = BufferRef::new(64 * MB, s.dense_len());
        let p = s.plan(dense, lists(4 * MB, rows, entries)).unwrap();
        assert_eq!((p.dense, p.counts, p.full_indices, p.seqlen_q, p.seqlen_k, p.q_blocks, p.kv_blocks), (64 * MB, 4 * MB, 7 * MB, 200, 300, 2, 3));
        let err = |dense: BufferRef, l: [BufferRef; 4]| s.plan(dense, l).unwrap_err();
        assert!(matches!(err(BufferRef::new(64 * MB, s.dense_len() - 1), lists(4 * MB, rows, entries)), Error::BufferTooSmall { tensor: "dense", .. }));
        assert!(matches!(err(BufferRef::new(0, s.dense_len()), lists(4 * MB, rows, entries)), Error::InvalidBuffer { tensor: "dense", .. }));
        let mut short = lists(4 * MB, rows, entries);
        short[3].len -= 1;
        assert!(matches!(err(dense, short), Error::BufferTooSmall { tensor: "block_mask.full_indices", .. }));
        let mut odd = lists(4 * MB, rows, entries);
        odd[1].ptr += 2;
        assert!(matches!(err(dense, odd), Error::Misaligned { tensor: "block_mask.indices", .. }));
        let mut shared = lists(4 * MB, rows, entries);
        shared[2].ptr = shared[0].ptr + 4;
        assert!(matches!(err(dense, shared), Error::InvalidBuffer { tensor: "block_mask.counts", reason } if reason.contains("block_mask.full_counts")));
        match err(BufferRef::new(4 * MB + 8, s.dense_len()), lists(4 * MB, rows, entries)) {
            Error::InvalidBuffer { tensor: "block_mask.counts", reason } => assert!(reason.contains("dense"), "{reason}"),
            e => panic!("{e:?}"),
        }
        // An empty mask reads nothing: no address needed.
        let empty = DenseMaskShape::new(1, 1, 0, 50).unwrap();
        assert!(empty.plan(BufferRef::new(0, 0), lists(4 * MB, 1, 1)).is_ok());
    }
}
