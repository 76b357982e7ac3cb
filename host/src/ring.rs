//! Ring attention (context parallelism): one attention call over a sequence sharded across the
//! GPUs of a host, K and V passed around a ring with NCCL (feature `nccl`).
//!
//! Each of `N` ranks holds a shard of Q, K and V (and of the output): `rows = seqlen / N`
//! query and key rows. The ranks compute in `N` steps: at step `i`, rank `r` holds the K/V
//! shard of rank `r - i`, attends its queries to it ([`Gpu::attention_forward_raw`]) and
//! meanwhile, on a second stream, sends that shard to rank `r + 1` and receives the next from
//! rank `r - 1` (`ncclSend`/`ncclRecv` in one group, double-buffered); each step's output and
//! log-sum-exp merge into a running f32 result ([`flashrs_abi::merge`]), the last into the
//! output. Nothing is `O(seqlen^2)`: a rank holds its shard, two K/V shards in flight, and an
//! f32 copy of its output rows.
//!
//! **Causal calls shard zigzag** ([`zigzag_rows`]), so that every rank does the same work: the
//! sequence is cut into `2N` chunks and rank `r` holds chunks `r` and `2N - 1 - r`. Then step
//! 0 is causal attention over the rank's two chunks (their positions keep their order), and at
//! every later step exactly half of the pairs are visible, as whole blocks: from a rank
//! `s < r`, all queries see the first chunk of its keys; from a rank `s > r`, the second query
//! chunk sees all its keys. Non-causal calls may shard any way that gives each rank the same
//! rows of Q and of K/V; [`zigzag_rows`] serves them too.
//!
//! [`launch`] runs a closure on every GPU of a host, one thread each, with the ring set up
//! (one NCCL communicator per GPU, a compute stream and a transfer stream).
//!
//! NCCL is loaded at run time (`libnccl.so`, as cudarc looks it up; the `nvidia-nccl` Python
//! wheels ship it as `libnccl.so.2`, which needs a `libnccl.so` link beside it on the library
//! path). Without it, [`launch`] and [`Ring::new`] return [`Error::Communication`].
use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use cudarc::nccl::{Comm, Id, NcclType, ReduceOp, group_end, group_start};
use flashrs_abi::MergeParams;
use flashrs_abi::merge::{MERGE_FIRST, MERGE_LAST};

use crate::buffers::{BufferRef, Buffers};
use crate::device::Gpu;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::params::{AttentionParams, Strides};

/// One rank's end of a ring: an NCCL communicator whose stream carries the ring's transfers.
///
/// The communicator's stream should not be the stream attention runs on: the transfers then
/// overlap the attention of the shard in hand.
pub struct Ring {
    comm: Comm,
}

impl Ring {
    /// A ring over `comm`'s ranks (rank `r` sends to `r + 1` and receives from `r - 1`).
    /// Errors: no NCCL library can be loaded.
    pub fn new(comm: Comm) -> Result<Ring> {
        nccl_present()?;
        Ok(Ring { comm })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }
}

/// True when the NCCL library can be loaded (cudarc looks for `libnccl.so` on the library
/// path).
pub fn nccl_available() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Errors unless cudarc can load the NCCL library (which it would otherwise panic over).
fn nccl_present() -> Result<()> {
    if nccl_available() {
        Ok(())
    } else {
        Err(Error::Communication("the NCCL library (libnccl.so) is not on the library path".into()))
    }
}

fn nccl_err(what: &str) -> impl Fn(cudarc::nccl::result::NcclError) -> Error + '_ {
    move |e| Error::Communication(format!("{what}: {e:?}"))
}

fn driver_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Communication(format!("{what}: {e}"))
}

/// The rows of a `seqlen`-row sequence rank `rank` of `world` holds under zigzag sharding: chunks
/// `rank` and `2 world - 1 - rank` of `2 world` equal chunks, in that order (its shard's first
/// and second half). Errors: `world` is 0, `rank` is not below it, or `seqlen` is not a
/// multiple of `2 world`.
pub fn zigzag_rows(seqlen: usize, world: usize, rank: usize) -> Result<[Range<usize>; 2]> {
    let invalid = |reason: String| Error::InvalidShape { what: "zigzag sharding", reason };
    if world == 0 || rank >= world {
        return Err(invalid(format!("rank {rank} of {world}")));
    }
    let chunks = 2 * world;
    if !seqlen.is_multiple_of(chunks) {
        return Err(invalid(format!("seqlen {seqlen} is not a multiple of 2 x {world} ranks")));
    }
    let c = seqlen / chunks;
    let second = chunks - 1 - rank;
    Ok([rank * c..(rank + 1) * c, second * c..(second + 1) * c])
}

/// What one step attends: which query rows of the shard, to which keys of the shard in hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Every query row to every key, masked as the call is: every step of a non-causal call,
    /// and step 0 of a causal one (the shard's own keys, whose two chunks keep their order).
    Whole,
    /// Every query row to the first half of the keys (from a rank before this one).
    FirstKeys,
    /// The second half of the query rows to every key (from a rank after this one).
    SecondQueries,
}

impl Step {
    /// The step at which rank `rank` of `world` holds the keys of rank `rank - i`.
    fn of(causal: bool, rank: usize, world: usize, i: usize) -> Step {
        let src = (rank + world - i) % world;
        match (causal, i) {
            (false, _) | (true, 0) => Step::Whole,
            (true, _) if src < rank => Step::FirstKeys,
            (true, _) => Step::SecondQueries,
        }
    }
}

/// The shapes of one rank's shard, checked.
struct Shard {
    batch: usize,
    rows: usize,
    heads_q: usize,
    heads_kv: usize,
    head_dim: usize,
    causal: bool,
}

impl Shard {
    fn q_len(&self) -> usize {
        self.batch * self.rows * self.heads_q * self.head_dim
    }
    fn kv_len(&self) -> usize {
        self.batch * self.rows * self.heads_kv * self.head_dim
    }
    fn lse_len(&self) -> usize {
        self.batch * self.heads_q * self.rows
    }

    /// The query rows a step attends, `first..first + rows`: where its output and log-sum-exp
    /// rows go.
    fn step_rows(&self, step: Step) -> (usize, usize) {
        match step {
            Step::Whole | Step::FirstKeys => (0, self.rows),
            Step::SecondQueries => (self.rows / 2, self.rows / 2),
        }
    }

    /// The parameters of a step, from the call's.
    fn step_params<'a>(&self, params: &AttentionParams<'a>, step: Step) -> Result<AttentionParams<'a>> {
        let half = self.rows / 2;
        let q = Strides::bshd(self.rows, self.heads_q, self.head_dim);
        let kv = Strides::bshd(self.rows, self.heads_kv, self.head_dim);
        let (Some(q), Some(kv)) = (q, kv) else { return Err(Error::InvalidShape { what: "ring shard", reason: "strides overflow".into() }) };
        let b = params.to_builder();
        match step {
            Step::Whole => Ok(params.clone()),
            Step::FirstKeys => b.seqlen_q(self.rows).seqlen_k(half).causal(false).k_strides(kv).v_strides(kv).build(),
            Step::SecondQueries => b.seqlen_q(half).seqlen_k(self.rows).causal(false).q_strides(q).o_strides(q).build(),
        }
    }
}

/// Checks what one rank can check alone, before anything is queued.
fn check_shard(params: &AttentionParams, world: usize, lens: [usize; 5]) -> Result<Shard> {
    let invalid = |reason: &str| Error::InvalidShape { what: "ring attention call", reason: reason.into() };
    if params.layout != Layout::default() {
        return Err(invalid("the ring takes fixed-length shards of K/V tensors (no variable-length rows, no paged cache)"));
    }
    if !params.mods.is_plain() {
        return Err(invalid("the ring takes no attention modifications"));
    }
    if params.head_dim_v() != params.head_dim {
        return Err(invalid("the ring takes V with K's head dimension (head_dim_v == head_dim)"));
    }
    if params.seqlen_q != params.seqlen_k {
        return Err(invalid("a rank's shard holds as many query as key rows (seqlen_q == seqlen_k)"));
    }
    let (rows, hq, hkv, d) = (params.seqlen_q, params.heads_q, params.heads_kv, params.head_dim);
    let contiguous = |s: Option<Strides>, heads| s.is_none_or(|s| Some(s) == Strides::bshd(rows, heads, d));
    let order = params.dim_order == crate::params::DimOrder::Bshd;
    if !order || !contiguous(params.q_strides, hq) || !contiguous(params.o_strides, hq) || !contiguous(params.k_strides, hkv) || !contiguous(params.v_strides, hkv) {
        return Err(invalid("the ring's shards are contiguous [batch, rows, heads, head_dim] tensors"));
    }
    if params.causal && world > 1 && rows % 2 != 0 {
        return Err(invalid("causal shards hold two zigzag chunks: an even number of rows"));
    }
    // The shapes' own checks (head_dim, GQA ratio, scale), and sizes that fit in 64 bits, so
    // that the shard's lengths below cannot overflow.
    params.clone().to_builder().build()?;
    let n = params.contiguous_lens()?;
    let [q, k, v, o, lse] = lens;
    let need = [("q", q, n.q), ("k", k, n.k), ("v", v, n.v), ("out", o, n.out), ("lse", lse, n.lse)];
    for (tensor, len, needed) in need {
        if len < needed {
            return Err(Error::BufferTooSmall { tensor, len: len as u64, needed: needed as u64 });
        }
    }
    Ok(Shard { batch: params.batch, rows, heads_q: hq, heads_kv: hkv, head_dim: d, causal: params.causal })
}

/// The values every rank must agree on, and whether this rank's checks passed.
fn agreement(p: &AttentionParams, ok: bool, dtype: crate::DType) -> [i64; 9] {
    let scale = p.softmax_scale.map_or(-1, |s| s.to_bits() as i64);
    [ok as i64, p.batch as i64, p.seqlen_q as i64, p.heads_q as i64, p.heads_kv as i64, p.head_dim as i64, p.causal as i64, dtype.code() as i64, scale]
}

impl Gpu {
    /// Ring attention over the GPUs of `ring`, called by every rank with its shard ([`crate::ring`]).
    ///
    /// `params` describes this rank's shard: `seqlen_q == seqlen_k` = its rows (a `1 / N` share
    /// of the sequence, zigzag-sharded when causal, see [`zigzag_rows`]), contiguous
    /// `[batch, rows, heads, head_dim]` tensors, no modifications; every rank passes the same.
    /// `out` receives this rank's output rows, `lse` (optional, f32 `[batch, heads_q, rows]`)
    /// their log-sum-exps over the whole sequence.
    ///
    /// Work is queued on `stream` (this GPU's) and on the communicator's stream, and the call
    /// returns once it is queued; `stream` is ordered after all of it, so K and V may be
    /// rewritten in its order. Scratch (two K/V shards in flight, the step's output, an f32
    /// accumulator of the output rows) comes from `stream`'s memory pool and goes back in its
    /// order.
    ///
    /// Before anything is queued the ranks agree (one small all-reduce, which waits for the
    /// transfer stream): a call that fails a rank's checks, or whose shapes, causal flag,
    /// scale or element type differ between ranks, returns the same error on every rank
    /// with every buffer untouched.
    #[allow(clippy::too_many_arguments)]
    pub fn ring_attention_forward<T>(
        &self,
        ring: &Ring,
        stream: &Arc<CudaStream>,
        params: &AttentionParams,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        lse: Option<&mut CudaSlice<f32>>,
    ) -> Result<()>
    where
        T: Element + NcclType + DeviceRepr,
    {
        self.make_current()?;
        let (world, rank) = (ring.world_size(), ring.rank());
        let lse_len = lse.as_ref().map_or(usize::MAX, |l| l.len());
        // Every check of this rank goes into the agreement: a rank that returned before it
        // would leave the others waiting in the all-reduce.
        let local = self.check_stream(stream.cu_stream() as *mut c_void).and_then(|()| {
            if ring.comm.context().cu_ctx() as *mut c_void != self.raw_context() {
                return Err(Error::WrongContext("the ring's communicator belongs to another GPU".into()));
            }
            check_shard(params, world, [q.len(), k.len(), v.len(), out.len(), lse_len])
        });
        let shard = self.agree(ring, stream, params, T::DTYPE, local)?;
        if shard.batch * shard.heads_q * shard.rows == 0 {
            return Ok(());
        }

        let raw = stream.cu_stream() as *mut c_void;
        let comm_stream = ring.comm.stream();
        // The user's buffers, ordered after their last writes on `stream` (cudarc's tracking).
        let (q_ptr, _q) = q.device_ptr(stream);
        let (k_ptr, _k) = k.device_ptr(stream);
        let (v_ptr, _v) = v.device_ptr(stream);
        let (o_ptr, _o) = out.device_ptr_mut(stream);
        let (lse_ptr, _l) = match lse {
            Some(l) => {
                let (p, g) = l.device_ptr_mut(stream);
                (p, Some(g))
            }
            None => (0, None),
        };
        let dtype = T::DTYPE;
        if world == 1 {
            let mut bufs = Buffers::new(dtype, BufferRef::new(q_ptr, shard.q_len()), BufferRef::new(k_ptr, shard.kv_len()), BufferRef::new(v_ptr, shard.kv_len()), BufferRef::new(o_ptr, shard.q_len()));
            bufs.lse = (lse_ptr != 0).then(|| BufferRef::new(lse_ptr, shard.lse_len()));
            // SAFETY: the buffers are the caller's live allocations of these lengths, borrowed
            // for the call; the stream is this GPU's.
            return unsafe { self.attention_forward_raw(raw, params, &bufs) };
        }

        let alloc = |n: usize| -> Result<CudaSlice<T>> {
            // SAFETY: every element is written (a transfer, a step's output) before it is read.
            unsafe { stream.alloc::<T>(n) }.map_err(driver_err("allocating ring scratch"))
        };
        let alloc_f32 = |n: usize| -> Result<CudaSlice<f32>> {
            // SAFETY: the merge reads the accumulator only after the first part wrote it.
            unsafe { stream.alloc::<f32>(n) }.map_err(driver_err("allocating ring scratch"))
        };
        let mut slots = [[alloc(shard.kv_len())?, alloc(shard.kv_len())?], [alloc(shard.kv_len())?, alloc(shard.kv_len())?]];
        let part = alloc(shard.q_len())?;
        let part_lse = alloc_f32(shard.lse_len())?;
        let acc = alloc_f32(shard.q_len())?;
        let acc_lse = alloc_f32(shard.lse_len())?;
        let slot_ptrs = slots.each_ref().map(|[k, v]| [k.device_ptr(stream).0, v.device_ptr(stream).0]);
        let (part_ptr, part_lse_ptr) = (part.device_ptr(stream).0, part_lse.device_ptr(stream).0);
        let (acc_ptr, acc_lse_ptr) = (acc.device_ptr(stream).0, acc_lse.device_ptr(stream).0);
        let first_keys = shard.step_params(params, Step::FirstKeys)?;
        let second_queries = shard.step_params(params, Step::SecondQueries)?;

        // Transfers start after what `stream` has queued (K and V written, scratch allocated).
        comm_stream.join(stream).map_err(driver_err("ordering the transfer stream"))?;
        let (next, prev) = (((rank + 1) % world) as i32, ((rank + world - 1) % world) as i32);
        let mut computed: Option<CudaEvent> = None;
        let mut received: Option<CudaEvent> = None;
        let row = shard.heads_q * shard.head_dim;
        for i in 0..world {
            // The K/V shard in hand: the caller's at step 0, then the slot step i - 1 filled;
            // step i fills the other slot.
            let (kc, vc) = if i == 0 { (k_ptr, v_ptr) } else { (slot_ptrs[(i - 1) % 2][0], slot_ptrs[(i - 1) % 2][1]) };
            if i + 1 < world {
                // The slot this transfer fills was read by step i - 1's attention.
                if let Some(e) = &computed {
                    comm_stream.wait(e).map_err(driver_err("ordering the transfer stream"))?;
                }
                let [s0, s1] = &mut slots;
                let (held, fill) = if i % 2 == 0 { (&*s1, s0) } else { (&*s0, s1) };
                group_start().map_err(nccl_err("ncclGroupStart"))?;
                let sent = if i == 0 {
                    ring.comm.send(k, next).and_then(|_| ring.comm.send(v, next))
                } else {
                    ring.comm.send(&held[0], next).and_then(|_| ring.comm.send(&held[1], next))
                };
                let [fk, fv] = fill;
                let got = sent.and_then(|_| ring.comm.recv(fk, prev)).and_then(|_| ring.comm.recv(fv, prev));
                let ended = group_end();
                got.and(ended).map_err(nccl_err("ring transfer"))?;
            }
            if let Some(e) = received.take() {
                stream.wait(&e).map_err(driver_err("waiting for a ring transfer"))?;
            }
            if i + 1 < world {
                received = Some(comm_stream.record_event(None).map_err(driver_err("recording a ring transfer"))?);
            }

            let step = Step::of(shard.causal, rank, world, i);
            let step_params = match step {
                Step::Whole => params,
                Step::FirstKeys => &first_keys,
                Step::SecondQueries => &second_queries,
            };
            let (q_row0, part_rows) = shard.step_rows(step);
            // Rows `q_row0..` of Q and of the step's output, which has the output's layout.
            let q_off = (q_row0 * row * std::mem::size_of::<T>()) as u64;
            let q_len = shard.q_len() - q_row0 * row;
            let mut bufs = Buffers::new(
                dtype,
                BufferRef::new(q_ptr + q_off, q_len),
                BufferRef::new(kc, shard.kv_len()),
                BufferRef::new(vc, shard.kv_len()),
                BufferRef::new(part_ptr + q_off, q_len),
            );
            bufs.lse = Some(BufferRef::new(part_lse_ptr, shard.batch * shard.heads_q * part_rows));
            // SAFETY: every address is a live allocation of the length given (the caller's
            // borrowed buffers, this call's scratch, freed in `stream`'s order after it), and
            // the K/V shard in hand was received before `stream` gets here.
            unsafe { self.attention_forward_raw(raw, step_params, &bufs)? };
            let last = i + 1 == world;
            let (row0, n_rows) = if last { (0, shard.rows) } else { (q_row0, part_rows) };
            let merge = MergeParams {
                acc: acc_ptr,
                acc_lse: acc_lse_ptr,
                part: part_ptr,
                part_lse: part_lse_ptr,
                out: o_ptr,
                out_lse: lse_ptr,
                batch: shard.batch as u32,
                rows: shard.rows as u32,
                heads: shard.heads_q as u32,
                head_dim: shard.head_dim as u32,
                row0: row0 as u32,
                n_rows: n_rows as u32,
                part_row0: q_row0 as u32,
                part_rows: part_rows as u32,
                flags: if i == 0 { MERGE_FIRST } else { 0 } | if last { MERGE_LAST } else { 0 },
            };
            // SAFETY: as above; the merge reads the step's output and log-sum-exp, which the
            // attention before it on `stream` wrote.
            unsafe { self.launch_merge(raw, dtype, &merge)? };
            computed = Some(stream.record_event(None).map_err(driver_err("recording a ring step"))?);
        }
        // The scratch is freed in `stream`'s order: after the last step, which waited for the
        // last transfer.
        drop((slots, part, part_lse, acc, acc_lse));
        Ok(())
    }

    /// Every rank's checks and shapes, agreed over the ring: the shard when all passed and
    /// match, else the same error on every rank (this rank's own if it failed).
    fn agree(&self, ring: &Ring, stream: &Arc<CudaStream>, params: &AttentionParams, dtype: crate::DType, local: Result<Shard>) -> Result<Shard> {
        let mine = agreement(params, local.is_ok(), dtype);
        // Max of the values and of their negations: every rank holds the same value exactly
        // when max == -max(-v).
        let both: Vec<i64> = mine.iter().copied().chain(mine.iter().map(|x| -x)).collect();
        let comm_stream = ring.comm.stream();
        comm_stream.join(stream).map_err(driver_err("ordering the transfer stream"))?;
        let send = comm_stream.clone_htod(&both).map_err(driver_err("copying the ring's agreement"))?;
        let mut recv = comm_stream.alloc_zeros::<i64>(both.len()).map_err(driver_err("allocating the ring's agreement"))?;
        ring.comm.all_reduce(&send, &mut recv, &ReduceOp::Max).map_err(nccl_err("ncclAllReduce"))?;
        let all = comm_stream.clone_dtoh(&recv).map_err(driver_err("reading the ring's agreement"))?;
        let n = mine.len();
        let shard = local?;
        if (0..n).any(|j| all[j] != -all[n + j]) {
            let reason = if -all[n] == 0 { "another rank's checks failed" } else { "the ranks' shapes, causal flags, scales or element types differ" };
            return Err(Error::InvalidShape { what: "ring attention call", reason: reason.into() });
        }
        Ok(shard)
    }
}

/// What [`launch`] gives each rank's closure: its GPU, opened, a stream to compute on, and its
/// end of the ring (whose communicator has a stream of its own for the transfers).
pub struct RankContext {
    /// This rank (its index in the GPUs [`launch`] was given).
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
    /// The rank's cudarc context (its GPU's primary context).
    pub ctx: Arc<CudaContext>,
    /// The rank's GPU.
    pub gpu: Gpu,
    /// A stream of the rank's GPU for attention and the caller's own work.
    pub stream: Arc<CudaStream>,
    /// The rank's end of the ring.
    pub ring: Ring,
}

/// Runs `f` once per GPU of `ordinals` (CUDA device ordinals, each once), each on a thread of
/// its own, with a ring over them in that order; returns the results in rank order.
///
/// Everything a rank can fail at alone (opening its GPU, its streams) happens first, on the
/// calling thread, so that no rank is left waiting in NCCL's initialisation for one that
/// failed. Errors: no NCCL library, no or repeated ordinals, a GPU that does not open, NCCL's
/// initialisation; a rank whose thread panics.
pub fn launch<R: Send>(ordinals: &[usize], f: impl Fn(RankContext) -> R + Sync) -> Result<Vec<R>> {
    nccl_present()?;
    let mut seen = ordinals.to_vec();
    seen.sort_unstable();
    seen.dedup();
    if ordinals.is_empty() || seen.len() != ordinals.len() {
        return Err(Error::InvalidShape { what: "ring", reason: format!("GPU ordinals {ordinals:?}: none or repeated") });
    }
    let mut ranks = Vec::with_capacity(ordinals.len());
    for &ordinal in ordinals {
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::NoGpu(format!("GPU {ordinal}: {e}")))?;
        let gpu = Gpu::from_cudarc(&ctx)?;
        let stream = ctx.new_stream().map_err(driver_err("creating a stream"))?;
        let transfers = ctx.new_stream().map_err(driver_err("creating a stream"))?;
        ranks.push((ctx, gpu, stream, transfers));
    }
    let id = Id::new().map_err(nccl_err("ncclGetUniqueId"))?;
    let world = ordinals.len();
    let f = &f;
    std::thread::scope(|s| {
        let threads: Vec<_> = ranks
            .into_iter()
            .enumerate()
            .map(|(rank, (ctx, gpu, stream, transfers))| {
                s.spawn(move || -> Result<R> {
                    ctx.bind_to_thread().map_err(driver_err("binding the GPU's context"))?;
                    let comm = Comm::from_rank(transfers, rank, world, id).map_err(nccl_err("ncclCommInitRank"))?;
                    Ok(f(RankContext { rank, world, ctx, gpu, stream, ring: Ring { comm } }))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().map_err(|_| Error::Communication("a rank's thread panicked".into()))?).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_gives_each_rank_a_chunk_from_each_end() {
        assert_eq!(zigzag_rows(16, 2, 0).unwrap(), [0..4, 12..16]);
        assert_eq!(zigzag_rows(16, 2, 1).unwrap(), [4..8, 8..12]);
        assert_eq!(zigzag_rows(8, 1, 0).unwrap(), [0..4, 4..8]);
        // Every row exactly once over the ranks.
        let mut rows: Vec<usize> = (0..4).flat_map(|r| zigzag_rows(40, 4, r).unwrap().into_iter().flatten()).collect();
        rows.sort_unstable();
        assert_eq!(rows, (0..40).collect::<Vec<_>>());
        assert!(zigzag_rows(10, 2, 0).is_err() && zigzag_rows(16, 2, 2).is_err() && zigzag_rows(16, 0, 0).is_err());
    }

    fn shard(rows: usize) -> crate::params::AttentionParamsBuilder<'static> {
        AttentionParams::builder().batch(2).seqlen(rows).heads_q(8).heads_kv(2).head_dim(64).causal(true)
    }

    /// Lengths of q, k, v, out and lse for `shard(rows)`.
    fn lens(rows: usize) -> [usize; 5] {
        [2 * rows * 8 * 64, 2 * rows * 2 * 64, 2 * rows * 2 * 64, 2 * rows * 8 * 64, 2 * 8 * rows]
    }

    /// What one rank can check alone gives typed errors naming the problem; a valid call passes.
    #[test]
    fn a_rank_checks_its_shard_alone() {
        let ok = check_shard(&shard(100).build().unwrap(), 4, lens(100)).unwrap();
        assert_eq!((ok.rows, ok.heads_q, ok.heads_kv, ok.q_len(), ok.kv_len(), ok.lse_len()), (100, 8, 2, 102400, 25600, 1600));
        let shape = |r: Result<Shard>| match r {
            Err(Error::InvalidShape { what: "ring attention call", reason }) => reason,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        };
        // Causal shards hold two zigzag chunks; one rank's odd shard is fine alone.
        assert!(shape(check_shard(&shard(101).build().unwrap(), 2, lens(101))).contains("even"));
        assert!(check_shard(&shard(101).build().unwrap(), 1, lens(101)).is_ok());
        assert!(check_shard(&shard(101).causal(false).build().unwrap(), 2, lens(101)).is_ok());
        assert!(shape(check_shard(&shard(100).seqlen_k(50).build().unwrap(), 2, lens(100))).contains("seqlen_q == seqlen_k"));
        let bhsd = shard(100).dim_order(crate::params::DimOrder::Bhsd).build().unwrap();
        assert!(shape(check_shard(&bhsd, 2, lens(100))).contains("contiguous"));
        let strided = shard(100).q_strides(Strides { batch: 100 * 8 * 64 * 2, row: 8 * 64, head: 64 }).build().unwrap();
        assert!(shape(check_shard(&strided, 2, lens(100))).contains("contiguous"));
        assert!(shape(check_shard(&shard(100).softcap(30.0).build().unwrap(), 2, lens(100))).contains("modifications"));
        assert!(shape(check_shard(&shard(100).varlen(&[0, 100, 200], &[0, 100, 200]).build().unwrap(), 2, lens(100))).contains("fixed-length"));
        // Every buffer's size, with the exact numbers.
        for (i, tensor) in ["q", "k", "v", "out", "lse"].into_iter().enumerate() {
            let mut l = lens(100);
            l[i] -= 1;
            match check_shard(&shard(100).build().unwrap(), 2, l) {
                Err(Error::BufferTooSmall { tensor: t, len, needed }) => assert_eq!((t, len + 1), (tensor, needed)),
                other => panic!("{tensor}: {:?}", other.err()),
            }
        }
    }

    /// The step parameters: whole shards, or half of the keys or queries with the shard's
    /// strides, never causal.
    #[test]
    fn steps_attend_halves_of_the_shard_with_its_strides() {
        let p = shard(100).build().unwrap();
        let s = check_shard(&p, 4, lens(100)).unwrap();
        assert_eq!(s.step_params(&p, Step::Whole).unwrap(), p);
        assert_eq!([Step::Whole, Step::FirstKeys, Step::SecondQueries].map(|st| s.step_rows(st)), [(0, 100), (0, 100), (50, 50)]);
        let fk = s.step_params(&p, Step::FirstKeys).unwrap();
        assert_eq!((fk.seqlen_q, fk.seqlen_k, fk.causal), (100, 50, false));
        assert_eq!(fk.k_strides, Strides::bshd(100, 2, 64));
        assert_eq!(fk.tensor_strides().unwrap()[1].batch, 100 * 2 * 64);
        let sq = s.step_params(&p, Step::SecondQueries).unwrap();
        assert_eq!((sq.seqlen_q, sq.seqlen_k, sq.causal), (50, 100, false));
        assert_eq!((sq.q_strides, sq.o_strides), (Strides::bshd(100, 8, 64), Strides::bshd(100, 8, 64)));
        assert_eq!(sq.scale(), p.scale(), "the shard's scale, not that of the half");
    }

    /// The visible (query, key) pairs of each step, in global positions, are exactly the
    /// causal pairs, each once: the zigzag schedule against a brute-force count.
    #[test]
    fn causal_steps_cover_every_visible_pair_once() {
        for world in 1..=5 {
            let seqlen = 4 * world;
            let shards: Vec<Vec<usize>> = (0..world).map(|r| zigzag_rows(seqlen, world, r).unwrap().into_iter().flatten().collect()).collect();
            let rows = seqlen / world;
            let mut seen = vec![0u32; seqlen * seqlen];
            for rank in 0..world {
                for i in 0..world {
                    let keys = &shards[(rank + world - i) % world];
                    let (qs, ks, causal): (Vec<usize>, Vec<usize>, bool) = match Step::of(true, rank, world, i) {
                        // A causal call's whole step is its own shard, causal.
                        Step::Whole => ((0..rows).collect(), (0..rows).collect(), true),
                        Step::FirstKeys => ((0..rows).collect(), (0..rows / 2).collect(), false),
                        Step::SecondQueries => ((rows / 2..rows).collect(), (0..rows).collect(), false),
                    };
                    for &qi in &qs {
                        for &ki in &ks {
                            if !causal || ki <= qi {
                                seen[shards[rank][qi] * seqlen + keys[ki]] += 1;
                            }
                        }
                    }
                }
            }
            for qg in 0..seqlen {
                for kg in 0..seqlen {
                    assert_eq!(seen[qg * seqlen + kg], (kg <= qg) as u32, "world {world}: query {qg}, key {kg}");
                }
            }
        }
    }
}
