//! Invalid input: every case gives its exact typed error, and nothing runs (the caller's
//! buffers keep every bit). Also the documented zero-size behaviour and grids whose
//! `batch * heads` exceeds 65535.
//!
//! Each case is checked twice: through the GPU-free planner (`AttentionParams::plan` with fake
//! addresses, always), and, where a GPU is present, through `Gpu::attention_forward` on real
//! buffers filled with a byte pattern that must read back unchanged (skipped without a GPU,
//! saying so). A valid control call through the same harness must change the output, which
//! shows the read-back would see a write.
//!
//! The last dimension is always contiguous: `Strides` has no `head_dim` stride, so a
//! non-contiguous last dimension cannot be expressed (callers make such tensors contiguous
//! first, as FlashAttention requires `stride(-1) == 1`).
use cust::memory::{CopyDestination, DeviceBuffer, DeviceMemory, DevicePointer, DeviceSlice};
use cust::stream::{Stream, StreamFlags};
use flashrs::tiles::CONFIGS;
use flashrs::{BufferRef, Buffers, DeviceWrite, DimOrder, Strides, TileConfig};
use flashrs::{AttentionParams, AttentionParamsBuilder, DType, Gpu, KernelPath};
use flashrs_tests::attn::check_many;
use flashrs_tests::expect::{Want, result_matches};
use flashrs_tests::{CustElement, H100, gpu_or_skip, params};

const TENSORS: [&str; 5] = ["q", "k", "v", "out", "lse"];
/// Fake allocations (planner part) live in distinct 1 TiB regions.
const REGION: u64 = 1 << 40;

/// Where one tensor's buffer starts.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Its own allocation, this many bytes in.
    Own(u64),
    /// The null address.
    Null,
    /// Inside tensor `.0`'s allocation, `.1` bytes in.
    In(usize, u64),
}

/// The error a case must give (`Ok` cases: [`Want::Ok`]).
/// One call: parameters, buffers (lengths in elements, places) and the expected result.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    p: AttentionParams<'static>,
    len: [usize; 5],
    place: [Place; 5],
    with_lse: bool,
    /// Element type of the buffers.
    dtype: DType,
    want: Want,
}

/// Elements a contiguous or strided tensor needs (highest offset + 1).
fn needed(dims: [usize; 4], s: Strides) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    ((dims[0] - 1) as i64 * s.batch + (dims[1] - 1) as i64 * s.row + (dims[2] - 1) as i64 * s.head) as usize + dims[3]
}

impl Case {
    /// A valid call of `p` with exactly sized f16 buffers and an lse.
    fn valid(name: &str, p: AttentionParamsBuilder<'static>) -> Self {
        let p = p.build().unwrap();
        let d = p.head_dim;
        let dq = [p.batch, p.seqlen_q, p.heads_q, d];
        let dk = [p.batch, p.seqlen_k, p.heads_kv, d];
        let s = |given: Option<Strides>, sl, h| given.unwrap_or_else(|| Strides::bshd(sl, h, d).unwrap());
        let len = [
            needed(dq, s(p.q_strides, p.seqlen_q, p.heads_q)),
            needed(dk, s(p.k_strides, p.seqlen_k, p.heads_kv)),
            needed(dk, s(p.v_strides, p.seqlen_k, p.heads_kv)),
            needed(dq, s(p.o_strides, p.seqlen_q, p.heads_q)),
            p.batch * p.heads_q * p.seqlen_q,
        ];
        Case { name: name.into(), p, len, place: [Place::Own(0); 5], with_lse: true, dtype: DType::F16, want: Want::Ok }
    }
    fn want(mut self, want: Want) -> Self {
        self.want = want;
        self
    }
    fn len(mut self, i: usize, len: usize) -> Self {
        self.len[i] = len;
        self
    }
    fn place(mut self, i: usize, place: Place) -> Self {
        self.place[i] = place;
        self
    }
    fn named(mut self, name: String) -> Self {
        self.name = name;
        self
    }

    /// The buffers as the planner sees them, at fake addresses.
    fn fake_buffers(&self) -> Buffers {
        let addr = |i: usize| match self.place[i] {
            Place::Own(off) => (i as u64 + 1) * REGION + off,
            Place::Null => 0,
            Place::In(j, off) => (j as u64 + 1) * REGION + off,
        };
        let r = |i: usize| BufferRef { ptr: addr(i), len: self.len[i] };
        let mut b = Buffers::new(self.dtype, r(0), r(1), r(2), r(3));
        b.lse = self.with_lse.then(|| r(4));
        b
    }
}

/// A small valid shape the invalid cases start from: GQA, causal, ragged lengths.
fn base() -> AttentionParamsBuilder<'static> {
    params(2, 37, 45, 4, 64).heads_kv(2).causal(true)
}

/// [`base`] with explicit strides (q, k, v, out).
fn strided(s: [Strides; 4]) -> AttentionParamsBuilder<'static> {
    base().q_strides(s[0]).k_strides(s[1]).v_strides(s[2]).o_strides(s[3])
}

fn cases() -> Vec<Case> {
    let ok = Case::valid("valid control", base());
    let mut v = vec![ok.clone()];
    // Buffers smaller than shape and strides imply, each tensor; and shape mismatches (K
    // sized for fewer keys, Q for fewer heads, out for bhsd padding).
    for i in 0..5 {
        let n = ok.len[i];
        v.push(ok.clone().len(i, n - 1).want(Want::TooSmall(TENSORS[i], n as u64, n as u64 - 1)).named(format!("{} one element short", TENSORS[i])));
    }
    let short_k = Case::valid("", base().causal(false)).len[1] * 40 / 45;
    v.push(ok.clone().len(1, short_k).want(Want::TooSmall("k", ok.len[1] as u64, short_k as u64)).named("k sized for 40 keys, 45 declared".into()));
    let short_q = ok.len[0] / 2;
    v.push(ok.clone().len(0, short_q).want(Want::TooSmall("q", ok.len[0] as u64, short_q as u64)).named("q sized for 2 heads, 4 declared".into()));
    let bhsd = Case::valid("", base().dim_order(DimOrder::Bhsd));
    v.push(
        Case { len: ok.len, ..bhsd.clone() }
            .len(3, ok.len[3] - 64)
            .want(Want::TooSmall("out", ok.len[3] as u64, ok.len[3] as u64 - 64))
            .named("bhsd out one row short".into()),
    );
    // heads_q not a multiple of heads_kv, zero heads_kv.
    for (hq, hkv) in [(4, 3), (2, 4), (6, 4), (7, 2)] {
        let c = Case::valid("", base().heads_kv(hkv));
        let mut p = c.p.clone();
        p.heads_q = hq;
        v.push(Case { p, ..c }.want(Want::Gqa(hq, hkv)).named(format!("heads_q {hq} heads_kv {hkv}")));
    }
    let mut p = ok.p.clone();
    p.heads_kv = 0;
    v.push(Case { p, ..ok.clone() }.want(Want::Shape("heads_kv")).named("heads_kv 0".into()));
    // Unsupported head_dim.
    for d in [0, 7, 12, 264] {
        let mut p = ok.p.clone();
        p.head_dim = d;
        v.push(Case { p, ..ok.clone() }.want(Want::HeadDim(d)).named(format!("head_dim {d}")));
    }
    // Base addresses that break 16-byte alignment (4 bytes for the f32 lse), each tensor.
    for i in 0..4 {
        for off in [2, 8] {
            v.push(ok.clone().place(i, Place::Own(off)).want(Want::Misaligned(TENSORS[i])).named(format!("{} base +{off} bytes", TENSORS[i])));
        }
    }
    v.push(ok.clone().place(4, Place::Own(2)).want(Want::Misaligned("lse")).named("lse base +2 bytes".into()));
    // Strides that break 16-byte alignment: rows of 68 elements (136 bytes).
    for i in 0..4 {
        let (mut s, d) = ([Strides::bshd(37, 4, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(37, 4, 64).unwrap()], 64);
        s[i].row += 4;
        s[i].batch = s[i].row * if i == 0 || i == 3 { 37 } else { 45 };
        let mut c = Case::valid("", strided(s));
        c.len = ok.len;
        c.len[i] = needed([2, if i == 0 || i == 3 { 37 } else { 45 }, if i == 0 || i == 3 { 4 } else { 2 }, d], s[i]);
        v.push(c.want(Want::Misaligned(TENSORS[i])).named(format!("{} row stride +4 elements", TENSORS[i])));
    }
    // Negative strides.
    for i in 0..4 {
        let mut s = [Strides::bshd(37, 4, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(37, 4, 64).unwrap()];
        s[i].head = -64;
        let c = Case { p: strided(s).build().unwrap(), ..ok.clone() };
        v.push(c.want(Want::Strides(TENSORS[i])).named(format!("{} negative head stride", TENSORS[i])));
    }
    // Offsets that overflow 64 bits: element offsets past i64, byte offsets past i64.
    for (i, stride, what) in [(0, i64::MAX / 4 & !7, "element"), (1, (1 << 62) / 44 + 8 & !7, "byte"), (3, 1 << 62, "element")] {
        let mut s = [Strides::bshd(37, 4, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(37, 4, 64).unwrap()];
        s[i].row = stride;
        let c = Case { p: strided(s).build().unwrap(), ..ok.clone() };
        v.push(c.want(Want::Strides(TENSORS[i])).named(format!("{} row stride {stride}: {what} offsets overflow", TENSORS[i])));
    }
    // Sequence lengths past the kernels' 32-bit masks.
    for (sq, sk, what) in [((i32::MAX / 2 + 1) as usize, 45, "seqlen_q"), (37, (i32::MAX / 2 + 1) as usize, "seqlen_k"), (37, usize::MAX, "seqlen_k")] {
        let mut p = ok.p.clone();
        (p.seqlen_q, p.seqlen_k) = (sq, sk);
        v.push(Case { p, ..ok.clone() }.want(Want::Shape(what)).named(format!("{what} {}", sq.max(sk))));
    }
    // More CTAs than a 1-D grid holds, including a product that wraps 64 bits.
    for (b, h) in [(1usize << 31, 1usize), (1 << 32, 1 << 32), ((1 << 63) + 1, 2)] {
        let mut p = base().heads_kv(1).build().unwrap();
        (p.batch, p.heads_q) = (b, h);
        v.push(Case { p, ..ok.clone() }.want(Want::Launch).named(format!("batch {b} x heads {h}")));
    }
    // Scales that are not positive and finite (times log2 e); a tile config that does not fit.
    for s in [f32::NAN, f32::INFINITY, 0.0, -1.0, 3e38] {
        v.push(Case { p: base().softmax_scale(s).build().unwrap(), ..ok.clone() }.want(Want::Shape("softmax_scale")).named(format!("softmax_scale {s}")));
    }
    let small: TileConfig = CONFIGS[0];
    let p = params(2, 37, 45, 4, 128).heads_kv(2).config(small);
    v.push(Case::valid("", p).want(Want::Shape("config")).named("head_dim 128 forced onto a d64 config".into()));
    // Null addresses; output strides that alias; written buffers overlapping others.
    for i in 0..5 {
        v.push(ok.clone().place(i, Place::Null).want(Want::Buffer(TENSORS[i])).named(format!("{} null", TENSORS[i])));
    }
    let mut o = Strides::bshd(37, 4, 64).unwrap();
    o.row = 0;
    v.push(Case { p: strided([Strides::bshd(37, 4, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), o]).build().unwrap(), ..ok.clone() }.want(Want::Strides("out")).named("out row stride 0".into()));
    o = Strides::bshd(37, 4, 64).unwrap();
    o.head = o.row;
    let c = Case { p: strided([Strides::bshd(37, 4, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), Strides::bshd(45, 2, 64).unwrap(), o]).build().unwrap(), ..ok.clone() };
    v.push(c.clone().len(3, c.len[3] * 2).want(Want::Strides("out")).named("out head stride = row stride".into()));
    for (w, victim, off) in [(3, 0, 0), (3, 1, 256), (3, 2, 0), (3, 4, 0), (4, 0, 64), (4, 2, 0)] {
        let tensor = if (w, victim) == (3, 4) { "out" } else { TENSORS[w] };
        v.push(ok.clone().place(w, Place::In(victim, off)).want(Want::Buffer(tensor)).named(format!("{} inside {}", TENSORS[w], TENSORS[victim])));
    }
    // Zero sizes: nothing to do, whatever the buffers (null, empty).
    for (name, p) in [("batch 0", params(0, 37, 45, 4, 64).heads_kv(2)), ("heads 0", params(2, 37, 45, 0, 64).heads_kv(0)), ("seqlen_q 0", params(2, 0, 45, 4, 64).heads_kv(2))] {
        let p = p.build().unwrap();
        v.push(Case { p: p.clone(), len: [0; 5], place: [Place::Null; 5], ..ok.clone() }.named(format!("{name}, null buffers: no-op")));
        v.push(Case { p, len: [1024; 5], ..ok.clone() }.named(format!("{name}, real buffers: no-op")));
    }
    v
}

// ------------------------------------------------------------------------------------------
// The GPU part.

/// The byte pattern of tensor `i`'s allocation.
fn pattern(i: usize, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|k| ((k * 7 + i * 31 + k / 251) % 251) as u8).collect()
}

/// Runs a case on the GPU: allocations filled with patterns, slices at the case's places.
/// Returns the call's result and the tensors whose allocation changed.
fn gpu_run<T: CustElement>(gpu: &Gpu, stream: &Stream, c: &Case) -> (flashrs::Result<()>, Vec<&'static str>) {
    let size = |i: usize| if i == 4 { 4 } else { 2 };
    let mut allocs: Vec<Option<(DeviceBuffer<u8>, Vec<u8>)>> = Vec::new();
    for i in 0..5 {
        allocs.push(match c.place[i] {
            Place::Own(off) => {
                // Capped: the cases whose lengths are absurd fail before any buffer is used.
                let bytes = off as usize + c.len[i].min(1 << 22) * size(i) + 64;
                let pat = pattern(i, bytes);
                Some((DeviceBuffer::from_slice(&pat).unwrap(), pat))
            }
            _ => None,
        });
    }
    let addr = |i: usize| -> u64 {
        match c.place[i] {
            Place::Own(off) => allocs[i].as_ref().unwrap().0.as_raw_ptr() + off,
            Place::Null => 0,
            Place::In(j, off) => allocs[j].as_ref().unwrap().0.as_raw_ptr() + off,
        }
    };
    // SAFETY: every slice lies in one of `allocs` (or is null / empty), all alive until after
    // the stream synchronises below. Aliasing slices are what the overlap cases test: the
    // planner must refuse them before anything runs.
    let slice = |i: usize| unsafe { DeviceSlice::<T>::from_raw_parts(DevicePointer::from_raw(addr(i)), c.len[i]) };
    let (q, k, v, mut o) = (slice(0), slice(1), slice(2), slice(3));
    let mut lse = unsafe { DeviceSlice::<f32>::from_raw_parts_mut(DevicePointer::from_raw(addr(4)), c.len[4]) };
    let r = gpu.attention_forward(stream, &c.p, &q, &k, &v, &mut o, c.with_lse.then_some(&mut lse as &mut dyn DeviceWrite<f32, Stream>));
    stream.synchronize().expect("stream failed after the call");
    let mut changed = Vec::new();
    for (i, a) in allocs.iter().enumerate() {
        if let Some((buf, pat)) = a {
            let mut back = vec![0u8; pat.len()];
            buf.copy_to(&mut back[..]).unwrap();
            if &back != pat {
                changed.push(TENSORS[i]);
            }
        }
    }
    (r, changed)
}

#[test]
fn invalid_inputs_give_typed_errors_and_touch_nothing() {
    let cases = cases();
    // Planner part, no GPU needed.
    for c in &cases {
        let r = c.p.plan(&c.fake_buffers(), &H100).map(|plan| {
            if matches!(c.want, Want::Ok) {
                assert_eq!(plan.is_empty(), c.name != "valid control", "{}: plan {plan:?}", c.name);
            }
        });
        assert!(result_matches(&r, &c.want), "{} (planner): got {r:?}, want {:?}\n{c:?}", c.name, c.want);
    }
    println!("invalid input (planner): {} cases give their exact typed result", cases.len());

    let Some(gpu) = gpu_or_skip("invalid_inputs_give_typed_errors_and_touch_nothing (GPU part)") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    for c in &cases {
        let (r, changed) = match c.dtype {
            DType::F16 => gpu_run::<half::f16>(&gpu, &stream, c),
            DType::Bf16 => gpu_run::<half::bf16>(&gpu, &stream, c),
            dtype => unreachable!("no kernels for {dtype:?}"),
        };
        assert!(result_matches(&r, &c.want), "{} (GPU): got {r:?}, want {:?}", c.name, c.want);
        if c.name == "valid control" {
            assert!(changed.contains(&"out") && changed.contains(&"lse"), "control call left out/lse unchanged: {changed:?}");
            assert!(!changed.iter().any(|t| ["q", "k", "v"].contains(t)), "control call wrote its inputs: {changed:?}");
        } else {
            assert!(changed.is_empty(), "{}: buffers changed: {changed:?} (result {r:?})", c.name);
        }
        println!("invalid input {:<45} -> {:<70} buffers untouched", c.name, r.as_ref().map_or_else(|e| e.to_string(), |_| "Ok".into()));
    }
    println!("invalid input (GPU): {} cases: exact errors, no buffer changed; the control call wrote out and lse only", cases.len());
}

/// `seqlen_k == 0`: output rows 0 and lse `-inf`, with K and V null; padding between output
/// rows untouched.
#[test]
fn no_keys_gives_zero_rows_and_minus_inf_lse() {
    let d = 64;
    let o = Strides { batch: 37 * (4 * d + 8) as i64, row: (4 * d + 8) as i64, head: d as i64 };
    let cases: Vec<Case> = [false, true]
        .map(|causal| {
            let p = params(2, 37, 0, 4, d).heads_kv(2).causal(causal);
            let p = p.q_strides(Strides::bshd(37, 4, d).unwrap()).k_strides(Strides::bshd(0, 2, d).unwrap()).v_strides(Strides::bshd(0, 2, d).unwrap()).o_strides(o);
            Case::valid("no keys", p).place(1, Place::Null).place(2, Place::Null).len(1, 0).len(2, 0)
        })
        .into();
    for c in &cases {
        assert!(c.p.plan(&c.fake_buffers(), &H100).is_ok_and(|plan| !plan.is_empty()), "no keys must plan");
    }
    let Some(gpu) = gpu_or_skip("no_keys_gives_zero_rows_and_minus_inf_lse (GPU part)") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    for c in &cases {
        let (p, causal) = (&c.p, c.p.causal);
        let n_o = c.len[3];
        let q = DeviceBuffer::from_slice(&vec![half::f16::from_f32(1.0); c.len[0]]).unwrap();
        let poison = half::f16::from_f32(7.0);
        let mut out = DeviceBuffer::from_slice(&vec![poison; n_o]).unwrap();
        let mut lse = DeviceBuffer::from_slice(&vec![7.0f32; c.len[4]]).unwrap();
        // SAFETY: empty slices; with no keys the kernel never reads K or V.
        let null = unsafe { DeviceSlice::<half::f16>::from_raw_parts(DevicePointer::null(), 0) };
        gpu.attention_forward(&stream, p, &q, &null, &null, &mut out, Some(&mut lse)).unwrap();
        stream.synchronize().unwrap();
        let mut out_h = vec![half::f16::ZERO; n_o];
        out.copy_to(&mut out_h[..]).unwrap();
        let mut lse_h = vec![0f32; c.len[4]];
        lse.copy_to(&mut lse_h[..]).unwrap();
        let (mut zeros, mut gaps) = (0, 0);
        for (i, &x) in out_h.iter().enumerate() {
            let in_row = (i as i64 % o.batch) % o.row < (4 * d) as i64;
            if in_row {
                assert_eq!(x.to_f32(), 0.0, "output element {i} is {x}, not 0");
                zeros += 1;
            } else {
                assert_eq!(x, poison, "padding element {i} was written");
                gaps += 1;
            }
        }
        assert!(lse_h.iter().all(|&l| l == f32::NEG_INFINITY), "lse not all -inf: {lse_h:?}");
        println!("no keys (causal={causal}): {zeros} output elements 0, {gaps} padding elements untouched, {} lse -inf", lse_h.len());
    }
}

/// The grid is 1-D: batch * heads beyond 65535 (a 2-D/3-D grid's y/z limit) works.
#[test]
fn batch_times_heads_beyond_65535() {
    let shapes = [
        (params(70000, 1, 1, 1, 64), DType::F16),
        (params(70000, 3, 2, 1, 64).causal(true), DType::F16),
        (params(70000, 2, 3, 1, 64), DType::F16),
        (params(1, 2, 3, 70000, 64).heads_kv(7000), DType::F16),
        (params(3, 3, 3, 30000, 64).heads_kv(30000), DType::Bf16),
    ]
    .map(|(p, dtype)| (p.build().unwrap(), dtype));
    for (p, dtype) in &shapes {
        let c = Case { dtype: *dtype, ..Case::valid("big grid", p.to_builder()) };
        let plan = p.plan(&c.fake_buffers(), &H100).unwrap();
        assert_eq!(plan.tiles as usize, p.batch * p.heads_q * p.seqlen_q.div_ceil(plan.kernel.block_m()));
        assert!(plan.tiles > 65535);
        // On the mma.sync kernels, one CTA per tile.
        let mma = p.plan(&c.fake_buffers(), &flashrs::Target::A100).unwrap();
        assert!(mma.grid == mma.tiles && mma.grid > 65535);
    }
    let Some(gpu) = gpu_or_skip("batch_times_heads_beyond_65535 (GPU part)") else { return };
    // Every row against the reference (the rows are short), on the default path (the wgmma
    // kernel on sm_90a GPUs) and on mma.sync.
    let cases: Vec<(AttentionParams<'static>, DType)> =
        [KernelPath::Auto, KernelPath::MmaSync].iter().flat_map(|&path| shapes.iter().map(move |(p, dtype)| (p.to_builder().path(path).build().unwrap(), *dtype))).collect();
    check_many(&gpu, &cases);
}
