//! Shared helpers of the integration tests.
//!
//! Two environment variables serve runs on GPU machines:
//! * `FLASHRS_REQUIRE_GPU=1`: a GPU test that would skip (no GPU, or a Hopper test on another
//!   GPU) fails instead, so a run on a GPU machine cannot pass by skipping.
//! * `FLASHRS_SEED=<n>`: the base seed of every random input ([`case_seed`]); each test binary
//!   prints the one it used, so a failure can be replayed.
use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::sync::OnceLock;

use cust::memory::{DeviceCopy, DeviceMemory, DeviceSlice};
use flashrs::{Arch, AttentionParams, AttentionParamsBuilder, BufferRef, Element, Target};
use rand::SeedableRng;
use rand::rngs::StdRng;

pub mod attn;
pub mod expect;
pub mod fp8;
pub mod grad;
pub mod mods;
pub mod paged;
pub mod varlen;

/// True when `FLASHRS_REQUIRE_GPU=1`: skipping is a failure.
fn gpu_required() -> bool {
    std::env::var("FLASHRS_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Reports a skipped test (straight to the handles: libtest captures print!/eprint!, and a skip
/// must be seen), or fails it under `FLASHRS_REQUIRE_GPU=1`.
fn skip(test: &str, why: &str) {
    assert!(!gpu_required(), "{test}: FLASHRS_REQUIRE_GPU=1, but it would skip: {why}");
    let msg = format!("SKIPPED {test}: {why}");
    let _ = writeln!(std::io::stderr(), "{msg}");
    let _ = writeln!(std::io::stdout(), "{msg}");
}

/// Opens GPU 0, or reports the test as skipped (with the reason) and returns `None` where no
/// GPU or driver is present. Any other failure to open the GPU is a test failure.
pub fn gpu_or_skip(test: &str) -> Option<flashrs::Gpu> {
    match flashrs::Gpu::new(0) {
        Ok(gpu) => Some(gpu),
        Err(flashrs::Error::NoGpu(reason)) => {
            skip(test, &format!("no GPU ({reason})"));
            None
        }
        Err(e) => panic!("{test}: opening the GPU failed: {e}"),
    }
}

/// [`gpu_or_skip`], also skipping (with the reason) GPUs that do not run the sm_90a module
/// (the Hopper kernels need an H100/H200).
pub fn hopper_or_skip(test: &str) -> Option<flashrs::Gpu> {
    let gpu = gpu_or_skip(test)?;
    if gpu.arch() != Arch::Sm90a {
        let (major, minor) = gpu.compute_capability();
        skip(test, &format!("needs an sm_90a GPU (H100/H200), this one is sm_{major}{minor}"));
        return None;
    }
    Some(gpu)
}

/// The target GPU-free planning tests plan for: an H100, whose plans take every path.
pub const H100: Target = Target::H100;

/// The base seed of this test binary's random inputs: `FLASHRS_SEED`, or a fresh one; printed
/// once.
pub fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let given = std::env::var("FLASHRS_SEED").ok().and_then(|s| s.parse().ok());
        let seed = given.unwrap_or_else(rand::random);
        let _ = writeln!(std::io::stderr(), "random inputs from FLASHRS_SEED={seed} (set it to replay)");
        seed
    })
}

/// A seed for one case: the base seed mixed with the running test (its thread's name) and the
/// case's position in it, so that `FLASHRS_SEED` replays every case of every test, whatever
/// order the tests run in.
pub fn case_seed() -> u64 {
    thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    let n = NEXT.with(|c| c.replace(c.get() + 1));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (base_seed(), std::thread::current().name().unwrap_or(""), n).hash(&mut h);
    h.finish()
}

/// An RNG seeded by [`case_seed`], and its seed (print it with a failure).
pub fn case_rng() -> (StdRng, u64) {
    let seed = case_seed();
    (StdRng::seed_from_u64(seed), seed)
}

/// A call of `batch` sequences of `seqlen_q` query and `seqlen_k` key rows, `heads_q` heads of
/// `head_dim`, the rest to set: `params(2, 128, 128, 4, 64).heads_kv(2).build().unwrap()`.
pub fn params<'a>(batch: usize, seqlen_q: usize, seqlen_k: usize, heads_q: usize, head_dim: usize) -> AttentionParamsBuilder<'a> {
    AttentionParams::builder().batch(batch).seqlen_q(seqlen_q).seqlen_k(seqlen_k).heads_q(heads_q).head_dim(head_dim)
}

/// `p` built, its keys split `num_splits` ways (`None`: as the planner chooses).
pub fn with_splits(p: AttentionParamsBuilder<'_>, num_splits: Option<usize>) -> AttentionParams<'_> {
    match num_splits {
        Some(n) => p.num_splits(n),
        None => p,
    }
    .build()
    .unwrap()
}

/// A device buffer's contents on the host.
pub fn to_host<T: DeviceCopy + Default + Clone>(d: &cust::memory::DeviceBuffer<T>) -> Vec<T> {
    use cust::memory::CopyDestination;
    let mut h = vec![T::default(); d.len()];
    d.copy_to(&mut h[..]).unwrap();
    h
}

/// A cust slice as the planner sees it: its address and length (its true capacity).
pub fn buffer_of<T: DeviceCopy>(s: &DeviceSlice<T>) -> BufferRef {
    BufferRef::new(s.as_raw_ptr(), s.len())
}

/// The kernel image `gpu` loaded, as a cust module in its (current, primary) context: for
/// launching the probe kernels, which are not part of the attention interface, with cust's
/// `launch!`.
pub fn probe_module(gpu: &flashrs::Gpu) -> cust::module::Module {
    let image = gpu.image().bytes().expect("decompressing the GPU's kernel image");
    // Takes PTX images too (the driver tells them apart).
    cust::module::Module::from_cubin(image, &[]).expect("loading the GPU's kernel image")
}

/// An element type the tests keep in cust buffers: the library's [`Element`] (f16, bf16 of
/// `half` 1), which does not imply cust's `DeviceCopy` (the library also serves cudarc).
pub trait CustElement: Element + DeviceCopy {}
impl<T: Element + DeviceCopy> CustElement for T {}

/// Made-up, well-separated device addresses of a call's tensors, for planning tests (a plan
/// of them is never launched), and buffers of ample size there.
pub mod fake {
    use flashrs::{BufferRef, Buffers, DType};

    /// Q's address.
    pub const Q: u64 = 1 << 40;
    /// K's address.
    pub const K: u64 = 2 << 40;
    /// V's address.
    pub const V: u64 = 3 << 40;
    /// The output's address.
    pub const O: u64 = 4 << 40;
    /// The log-sum-exp's address.
    pub const LSE: u64 = 5 << 40;

    /// bf16 buffers of 2^30 elements at those addresses, with a log-sum-exp.
    pub fn buffers() -> Buffers {
        let b = |ptr| BufferRef::new(ptr, 1 << 30);
        Buffers::new(DType::Bf16, b(Q), b(K), b(V), b(O)).lse(b(LSE))
    }
}

/// An index array at a made-up address, for planning tests: planning reads no index array, and
/// a plan holding one is never launched.
pub fn planning_index(ptr: u64, len: usize) -> flashrs::DeviceIndex<'static> {
    // SAFETY: only planned, never launched (see above).
    unsafe { flashrs::DeviceIndex::from_raw(ptr, len) }
}

/// `v` rounded to f16 (`mode` 0) or bf16 (`mode` 1), as the probe kernels' `mode` selects: its
/// bits and its exact value.
pub fn encode_16(mode: u32, v: f32) -> (u16, f64) {
    if mode == 1 {
        let h = half::bf16::from_f32(v);
        (h.to_bits(), h.to_f32() as f64)
    } else {
        let h = half::f16::from_f32(v);
        (h.to_bits(), h.to_f32() as f64)
    }
}
