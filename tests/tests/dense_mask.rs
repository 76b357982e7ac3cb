//! Block masks built on the GPU from a dense boolean mask (`Gpu::block_mask_from_dense`):
//! against the host's `HostBlockMask::from_dense` on the same bytes, list for list and entry
//! for entry (every entry written: the arrays start poisoned); an attention call over the
//! GPU-built mask against the same call over the host-built one, bit for bit; typed errors
//! with the arrays untouched; a 256 MB mask's build time. Without a GPU, the shapes and plans are checked in the library's
//! unit tests and these skip.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DenseMaskShape, DeviceArray, Error};
use flashrs_tests::mods::host_lists;
use flashrs_tests::{case_rng, gpu_or_skip};
use rand::Rng;

const POISON: i32 = -7;

/// A dense mask whose (query block, key block) pairs are each empty, full, or random with
/// density `p`, so that every kind of block occurs, with ragged edges.
fn dense_mask(rng: &mut impl Rng, batch: usize, heads: usize, sq: usize, sk: usize) -> Vec<u8> {
    let (qb, kb) = (sq.div_ceil(128).max(1), sk.div_ceil(128).max(1));
    let kinds: Vec<u8> = (0..batch * heads * qb * kb).map(|_| rng.random_range(0..4)).collect();
    let mut m = vec![0u8; batch * heads * sq * sk];
    for (bh, chunk) in m.chunks_mut((sq * sk).max(1)).enumerate().take(batch * heads) {
        for r in 0..sq {
            for k in 0..sk {
                let kind = kinds[(bh * qb + r / 128) * kb + k / 128];
                chunk[r * sk + k] = match kind {
                    0 => 0,
                    1 => 1,
                    2 => rng.random_bool(0.5) as u8,
                    // One set byte in the block, or (rarely) none.
                    _ => (r % 128 == 5 && k % 128 == 9) as u8,
                };
            }
        }
    }
    m
}

/// The four lists as the GPU wrote them.
struct Lists {
    counts: DeviceBuffer<i32>,
    indices: DeviceBuffer<i32>,
    full_counts: DeviceBuffer<i32>,
    full_indices: DeviceBuffer<i32>,
}

impl Lists {
    fn poisoned(s: &DenseMaskShape) -> Self {
        let p = |n: usize| DeviceBuffer::from_slice(&vec![POISON; n]).unwrap();
        Lists { counts: p(s.counts_len()), indices: p(s.indices_len()), full_counts: p(s.counts_len()), full_indices: p(s.indices_len()) }
    }

    fn host(&self) -> [Vec<i32>; 4] {
        [&self.counts, &self.indices, &self.full_counts, &self.full_indices].map(|b| {
            let mut v = vec![0i32; b.len()];
            b.copy_to(&mut v[..]).unwrap();
            v
        })
    }
}

#[test]
fn gpu_lists_match_the_host_builder() {
    let Some(gpu) = gpu_or_skip("gpu_lists_match_the_host_builder") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let (mut rng, seed) = case_rng();
    println!("seed {seed}");
    let shapes = [(1, 1, 1, 1), (2, 3, 300, 129), (1, 2, 127, 1037), (1, 1, 128, 128), (3, 1, 129, 257), (1, 4, 1037, 17), (1, 1, 0, 40), (2, 1, 40, 0), (1, 1, 2048, 2048)];
    for (b, h, sq, sk) in shapes {
        let dense = dense_mask(&mut rng, b, h, sq, sk);
        let want = host_lists(&dense, b, h, sq, sk);
        let shape = DenseMaskShape::new(b, h, sq, sk).unwrap();
        let dense_d = DeviceBuffer::from_slice(if dense.is_empty() { &[0u8][..] } else { &dense[..] }).unwrap();
        let mut l = Lists::poisoned(&shape);
        let mask = gpu.block_mask_from_dense(&stream, &dense_d, shape, &mut l.counts, &mut l.indices, &mut l.full_counts, &mut l.full_indices).unwrap();
        assert_eq!((mask.batch, mask.heads, mask.q_blocks, mask.kv_blocks), (b, h, want.q_blocks, want.kv_blocks));
        stream.synchronize().unwrap();
        let got = l.host();
        let label = format!("{b} x {h} x {sq} x {sk}");
        assert_eq!(got[0], want.counts, "{label}: partial counts");
        assert_eq!(got[1], want.indices, "{label}: partial indices");
        assert_eq!(got[2], want.full_counts, "{label}: full counts");
        assert_eq!(got[3], want.full_indices, "{label}: full indices");
        let (partial, full) = (want.counts.iter().sum::<i32>(), want.full_counts.iter().sum::<i32>());
        println!("ok   {label}: {partial} partial and {full} full blocks of {}", want.indices.len());
    }
}

/// A long-context mask, 4 heads of 8192 x 8192 (256 MB): the lists as the host builds them,
/// and the build's time (median of 5 launches after one, timed by the host around a
/// synchronised stream), printed with the bytes it reads per second.
#[test]
fn a_large_mask_and_its_time() {
    let Some(gpu) = gpu_or_skip("a_large_mask_and_its_time") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let (b, h, sq, sk) = (1, 4, 8192, 8192);
    // Per head a different band of 1024 keys before the diagonal, causal: blocks full, partial
    // (the band's edges and the diagonal) and skipped.
    let dense: Vec<u8> = (0..b * h * sq * sk)
        .map(|i| {
            let (head, r, k) = (i / (sq * sk), i / sk % sq, i % sk);
            (k <= r && r - k < 1024 + 300 * head) as u8
        })
        .collect();
    let want = host_lists(&dense, b, h, sq, sk);
    let shape = DenseMaskShape::new(b, h, sq, sk).unwrap();
    let dense_d = DeviceBuffer::from_slice(&dense).unwrap();
    let mut l = Lists::poisoned(&shape);
    let mut times = vec![];
    for _ in 0..6 {
        stream.synchronize().unwrap();
        let start = std::time::Instant::now();
        gpu.block_mask_from_dense(&stream, &dense_d, shape, &mut l.counts, &mut l.indices, &mut l.full_counts, &mut l.full_indices).unwrap();
        stream.synchronize().unwrap();
        times.push(start.elapsed().as_secs_f64());
    }
    let got = l.host();
    assert!(got == [want.counts.clone(), want.indices.clone(), want.full_counts.clone(), want.full_indices.clone()], "the lists differ from the host's");
    let mut t = times[1..].to_vec();
    t.sort_by(f64::total_cmp);
    let median = t[t.len() / 2];
    println!("ok   {b} x {h} x {sq} x {sk}: {:.1}% of blocks visited; built in {:.3} ms ({:.0} GB/s of mask)", 100.0 * want.density(), median * 1e3, dense.len() as f64 / median / 1e9);
}

#[test]
fn attention_over_a_gpu_built_mask_is_the_host_built_masks() {
    let Some(gpu) = gpu_or_skip("attention_over_a_gpu_built_mask_is_the_host_built_masks") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let (mut rng, seed) = case_rng();
    println!("seed {seed}");
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 700, 900, 128);
    // Document ids of packed sequences: a row sees the keys of its own document, causally.
    let doc = |i: usize| i / 250;
    let mut dense = vec![0u8; b * hq * sq * sk];
    for (bh, chunk) in dense.chunks_mut(sq * sk).enumerate() {
        let shift = 37 * (bh % hq);
        for r in 0..sq {
            for k in 0..sk {
                let (rr, kk) = (r + sk - sq + shift, k + shift);
                chunk[r * sk + k] = (doc(rr) == doc(kk) && kk <= rr) as u8;
            }
        }
    }
    let host = host_lists(&dense, b, hq, sq, sk);
    let up = |v: &[i32]| DeviceBuffer::from_slice(v).unwrap();
    let (hc, hi, hfc, hfi) = (up(&host.counts), up(&host.indices), up(&host.full_counts), up(&host.full_indices));
    let host_mask = host.on_device(DeviceArray::new(&hc), DeviceArray::new(&hi), DeviceArray::new(&hfc), DeviceArray::new(&hfi)).unwrap();
    let shape = DenseMaskShape::new(b, hq, sq, sk).unwrap();
    let dense_d = DeviceBuffer::from_slice(&dense).unwrap();
    let mut l = Lists::poisoned(&shape);
    let gpu_mask = gpu.block_mask_from_dense(&stream, &dense_d, shape, &mut l.counts, &mut l.indices, &mut l.full_counts, &mut l.full_indices).unwrap();
    let mut data = |n: usize| DeviceBuffer::from_slice(&(0..n).map(|_| half::bf16::from_f32(rng.random_range(-2.0f32..2.0))).collect::<Vec<_>>()).unwrap();
    let (q, k, v) = (data(b * sq * hq * d), data(b * sk * hkv * d), data(b * sk * hkv * d));
    let mut outs = vec![];
    for mask in [host_mask, gpu_mask] {
        let p = AttentionParams::builder().batch(b).seqlen_q(sq).seqlen_k(sk).heads_q(hq).heads_kv(hkv).head_dim(d).causal(true).block_mask(mask).build().unwrap();
        let mut o = DeviceBuffer::from_slice(&vec![half::bf16::from_f32(f32::NAN); b * sq * hq * d]).unwrap();
        gpu.attention_forward(&stream, &p, &q, &k, &v, &mut o, None).unwrap();
        stream.synchronize().unwrap();
        let mut h = vec![half::bf16::ZERO; o.len()];
        o.copy_to(&mut h[..]).unwrap();
        outs.push(h.iter().map(|x| x.to_bits()).collect::<Vec<u16>>());
    }
    assert!(outs[0] == outs[1], "the outputs over the GPU-built and host-built masks differ");
    let visited: i32 = host.counts.iter().chain(&host.full_counts).sum();
    println!("ok   document mask {b} x {hq} x {sq} x {sk}: {visited} blocks visited of {}, outputs bit-identical", host.indices.len());
}

#[test]
fn bad_arrays_are_typed_errors_with_the_arrays_untouched() {
    let Some(gpu) = gpu_or_skip("bad_arrays_are_typed_errors_with_the_arrays_untouched") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let shape = DenseMaskShape::new(1, 2, 300, 300).unwrap();
    let dense = DeviceBuffer::from_slice(&vec![1u8; shape.dense_len()]).unwrap();
    let short_dense = DeviceBuffer::from_slice(&vec![1u8; shape.dense_len() - 1]).unwrap();
    let mut l = Lists::poisoned(&shape);
    let mut short = DeviceBuffer::from_slice(&vec![POISON; shape.indices_len() - 1]).unwrap();
    let e = gpu.block_mask_from_dense(&stream, &short_dense, shape, &mut l.counts, &mut l.indices, &mut l.full_counts, &mut l.full_indices).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "dense", .. }), "{e:?}");
    let e = gpu.block_mask_from_dense(&stream, &dense, shape, &mut l.counts, &mut l.indices, &mut l.full_counts, &mut short).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "block_mask.full_indices", .. }), "{e:?}");
    stream.synchronize().unwrap();
    let mut rest = vec![0i32; short.len()];
    short.copy_to(&mut rest[..]).unwrap();
    assert!(l.host().iter().chain([&rest]).all(|v| v.iter().all(|&x| x == POISON)), "a refused call wrote a list");
    println!("ok   refused builds wrote nothing");
}
