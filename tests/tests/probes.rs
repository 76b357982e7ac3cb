//! The probe kernels of `kernels-gpu/src/probes/` on the GPU, each against a CPU computation.
//! Inputs are random and never zero; outputs are poisoned before every launch, so an element
//! the kernel fails to write shows up. Hopper probes skip (saying so) on other GPUs, and every
//! test skips where no GPU is present.

use cust::launch;
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::tensor_map::{Swizzle, TensorDataType, TensorMap, TensorMapParam};
use flashrs_tests::{gpu_or_skip, hopper_or_skip, probe_module};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A tensor map parameter that cust's `launch!` passes by value, byte for byte (the library's
/// type is not tied to cust).
#[repr(transparent)]
#[derive(Clone, Copy)]
struct MapParam(TensorMapParam);

// SAFETY: plain bytes with no host pointers inside (the map's device address is just a number).
unsafe impl cust::memory::DeviceCopy for MapParam {}

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("creating a stream")
}

/// Random values in ±[0.25, 1): never zero, and products of two stay well inside f16 range.
fn nonzero_values(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let m: f32 = rng.random_range(0.25..1.0);
            if rng.random::<bool>() { m } else { -m }
        })
        .collect()
}

/// 16-bit encodings (f16 or bf16) of `vals` and the values they round to.
fn to_16bit(vals: &[f32], is_bf16: bool) -> (Vec<u16>, Vec<f64>) {
    vals.iter()
        .map(|&v| {
            if is_bf16 {
                let h = bf16::from_f32(v);
                (h.to_bits(), h.to_f32() as f64)
            } else {
                let h = f16::from_f32(v);
                (h.to_bits(), h.to_f32() as f64)
            }
        })
        .unzip()
}

/// Compares `got` with `want` element by element within `tol[i]` (NaN never passes) and
/// panics with the first mismatches, as (row, col) of a `cols`-wide matrix.
fn assert_close(what: &str, got: &[f32], want: &[f64], tol: &[f64], cols: usize) {
    assert_eq!(got.len(), want.len());
    let bad: Vec<usize> = (0..got.len()).filter(|&i| !((got[i] as f64 - want[i]).abs() <= tol[i])).collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(8)
            .map(|&i| format!("({}, {}): got {} want {:.6} tol {:.2e}", i / cols, i % cols, got[i], want[i], tol[i]))
            .collect();
        panic!("{what}: {} of {} elements off:\n  {}", bad.len(), got.len(), first.join("\n  "));
    }
}

/// `C[m][n] = sum_k A[m][k] * Bt[n][k]` over the first `k` columns (rows `lda` wide) and the
/// matching tolerance: tensor-core f32 accumulation of exact products, 1e-3 of the magnitude.
fn matmul_bt(a: &[f64], bt: &[f64], m: usize, n: usize, k: usize, lda: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; m * n];
    let mut tol = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0, 0.0);
            for kk in 0..k {
                let p = a[i * lda + kk] * bt[j * lda + kk];
                s += p;
                mag += p.abs();
            }
            c[i * n + j] = s;
            tol[i * n + j] = 1e-3 * mag + 1e-6;
        }
    }
    (c, tol)
}

#[test]
fn probe_mma_m16n8k16() {
    let Some(gpu) = gpu_or_skip("probe_mma_m16n8k16") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0x3a1);
    for is_bf16 in [false, true] {
        let (a_bits, a) = to_16bit(&nonzero_values(&mut rng, 16 * 16), is_bf16);
        let (bt_bits, bt) = to_16bit(&nonzero_values(&mut rng, 8 * 16), is_bf16);
        let c = nonzero_values(&mut rng, 16 * 8);
        let (mut want, mut tol) = matmul_bt(&a, &bt, 16, 8, 16, 16);
        for i in 0..want.len() {
            want[i] += c[i] as f64;
            tol[i] += 1e-3 * (c[i] as f64).abs();
        }
        let a_d = DeviceBuffer::from_slice(&a_bits).unwrap();
        let bt_d = DeviceBuffer::from_slice(&bt_bits).unwrap();
        let c_d = DeviceBuffer::from_slice(&c).unwrap();
        let d_d = DeviceBuffer::from_slice(&vec![f32::NAN; 16 * 8]).unwrap();
        unsafe {
            launch!(module.probe_mma_m16n8k16<<<1, 32, 768, stream>>>(
                a_d.as_device_ptr(), bt_d.as_device_ptr(), c_d.as_device_ptr(), d_d.as_device_ptr(), is_bf16 as u32
            ))
            .unwrap();
        }
        stream.synchronize().unwrap();
        let mut d = vec![0f32; 16 * 8];
        d_d.copy_to(&mut d).unwrap();
        assert_close(&format!("mma m16n8k16 ({})", if is_bf16 { "bf16" } else { "f16" }), &d, &want, &tol, 8);
    }
}

#[test]
fn probe_cp_async_pipeline() {
    let Some(gpu) = gpu_or_skip("probe_cp_async_pipeline") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0xc9a);
    const TILE_CHUNKS: usize = 256;
    // (tiles, valid 16-byte chunks): fewer tiles than stages, a partial last tile, a tile
    // that is all zero-fill, and a long ring.
    for (n_tiles, valid_chunks) in [(1, 256), (2, 300), (3, 2 * 256), (7, 7 * 256 - 37), (20, 20 * 256)] {
        let src: Vec<u32> = (0..valid_chunks * 4).map(|_| rng.random_range(1..=u32::MAX)).collect();
        let src_d = DeviceBuffer::from_slice(&src).unwrap();
        let dst_d = DeviceBuffer::from_slice(&vec![0xDEAD_BEEFu32; n_tiles * TILE_CHUNKS * 4]).unwrap();
        unsafe {
            launch!(module.probe_cp_async_pipeline<<<1, 128, 3 * 4096, stream>>>(
                src_d.as_device_ptr(), dst_d.as_device_ptr(), n_tiles as u32, valid_chunks as u32
            ))
            .unwrap();
        }
        stream.synchronize().unwrap();
        let mut dst = vec![0u32; n_tiles * TILE_CHUNKS * 4];
        dst_d.copy_to(&mut dst).unwrap();
        let bad: Vec<usize> =
            (0..dst.len()).filter(|&i| dst[i] != if i < src.len() { src[i] } else { 0 }).collect();
        assert!(
            bad.is_empty(),
            "cp.async ring ({n_tiles} tiles, {valid_chunks} valid chunks): {} of {} words wrong, first at word {} (got {:#x})",
            bad.len(),
            dst.len(),
            bad[0],
            dst[bad[0]]
        );
    }
}

#[test]
fn probe_mbarrier_handshake() {
    let Some(gpu) = hopper_or_skip("probe_mbarrier_handshake") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0x3ba);
    let (blocks, rounds) = (4usize, 37usize);
    let inp: Vec<u32> = (0..blocks * rounds * 32).map(|_| rng.random_range(1..=u32::MAX)).collect();
    let inp_d = DeviceBuffer::from_slice(&inp).unwrap();
    let out_d = DeviceBuffer::from_slice(&vec![0u32; inp.len()]).unwrap();
    unsafe {
        launch!(module.probe_mbarrier_handshake<<<blocks as u32, 64, 256, stream>>>(
            inp_d.as_device_ptr(), out_d.as_device_ptr(), rounds as u32
        ))
        .unwrap();
    }
    stream.synchronize().unwrap();
    let mut out = vec![0u32; inp.len()];
    out_d.copy_to(&mut out).unwrap();
    for row in 0..blocks * rounds {
        for l in 0..32 {
            let want = inp[row * 32 + (7 * l) % 32];
            assert_eq!(out[row * 32 + l], want, "mbarrier handshake: block {} round {} lane {l}", row / rounds, row % rounds);
        }
    }
}

#[test]
fn probe_wgmma() {
    let Some(gpu) = hopper_or_skip("probe_wgmma") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0x9e3);
    for n in [32usize, 64, 128, 256] {
        let kernel = format!("probe_wgmma_m64n{n}k16");
        let func = module.get_function(&kernel).unwrap();
        // mode: 0 f16 SS, 1 bf16 SS, 2 f16 RS, 3 bf16 RS (A from registers).
        for mode in 0..4u32 {
            let is_bf16 = mode % 2 == 1;
            let (a_bits, a) = to_16bit(&nonzero_values(&mut rng, 64 * 64), is_bf16);
            let (bt_bits, bt) = to_16bit(&nonzero_values(&mut rng, n * 64), is_bf16);
            let a_d = DeviceBuffer::from_slice(&a_bits).unwrap();
            let bt_d = DeviceBuffer::from_slice(&bt_bits).unwrap();
            for k_steps in [1u32, 4] {
                let d_d = DeviceBuffer::from_slice(&vec![f32::NAN; 64 * n]).unwrap();
                let smem = (1024 + 64 * 128 + n * 128) as u32;
                unsafe {
                    launch!(func<<<1, 128, smem, stream>>>(
                        a_d.as_device_ptr(), bt_d.as_device_ptr(), d_d.as_device_ptr(), k_steps, mode
                    ))
                    .unwrap();
                }
                stream.synchronize().unwrap();
                let mut d = vec![0f32; 64 * n];
                d_d.copy_to(&mut d).unwrap();
                let (want, tol) = matmul_bt(&a, &bt, 64, n, 16 * k_steps as usize, 64);
                let what = format!(
                    "{kernel} {} {} k_steps={k_steps}",
                    if is_bf16 { "bf16" } else { "f16" },
                    if mode >= 2 { "A from registers" } else { "A from shared memory" }
                );
                assert_close(&what, &d, &want, &tol, n);
            }
        }
    }
}

#[test]
fn probe_tma_2d() {
    let Some(gpu) = hopper_or_skip("probe_tma_2d") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0x7a2);
    // A 200 x 136 matrix of 16-bit elements in rows of 144 (padding past the last column).
    let (rows, cols, ld) = (200usize, 136usize, 144usize);
    let g: Vec<u16> = (0..rows * ld).map(|_| rng.random_range(1..=u16::MAX)).collect();
    let g_d = DeviceBuffer::from_slice(&g).unwrap();
    let addr = g_d.as_device_ptr().as_raw();
    for swizzle in [Swizzle::None, Swizzle::B128] {
        let map = TensorMap::matrix(TensorDataType::F16, addr, rows as u64, cols as u64, ld as u64, 64, 64, swizzle)
            .expect("encoding the tensor map");
        // Inside, at the far corner (partly outside both dimensions), and before the origin.
        for (c0, c1) in [(0i32, 0i32), (64, 64), (72, 136), (128, 192), (-16, -8)] {
            let out_d = DeviceBuffer::from_slice(&vec![0xAAAAu16; 64 * 64]).unwrap();
            let status_d = DeviceBuffer::from_slice(&[u32::MAX]).unwrap();
            unsafe {
                launch!(module.probe_tma_2d<<<1, 128, 1024 + 8192 + 64, stream>>>(
                    MapParam(map.param()), out_d.as_device_ptr(), status_d.as_device_ptr(), c0, c1, (swizzle != Swizzle::None) as u32
                ))
                .unwrap();
            }
            stream.synchronize().unwrap();
            let mut status = [0u32];
            status_d.copy_to(&mut status).unwrap();
            assert_eq!(
                status[0], 0,
                "probe_tma_2d: the tensor map parameter is not 64-byte aligned (status = 1 + address % 64); \
                 the TensorMapParam padding assumption (parameters start at bank offset 16 mod 64) does not hold"
            );
            let mut out = vec![0u16; 64 * 64];
            out_d.copy_to(&mut out).unwrap();
            let mut bad = Vec::new();
            for r in 0..64 {
                for c in 0..64 {
                    let (gr, gc) = (c1 as i64 + r as i64, c0 as i64 + c as i64);
                    let inside = (0..rows as i64).contains(&gr) && (0..cols as i64).contains(&gc);
                    let want = if inside { g[gr as usize * ld + gc as usize] } else { 0 };
                    if out[r * 64 + c] != want {
                        bad.push(format!("({r}, {c}): got {:#06x} want {want:#06x}", out[r * 64 + c]));
                    }
                }
            }
            assert!(
                bad.is_empty(),
                "TMA 2D box at ({c0}, {c1}), swizzle {swizzle:?}: {} of 4096 elements wrong:\n  {}",
                bad.len(),
                bad[..bad.len().min(8)].join("\n  ")
            );
        }
    }
}

#[test]
fn probe_backward_atoms() {
    let Some(gpu) = gpu_or_skip("probe_backward_atoms") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0xb4c);
    let vals = nonzero_values(&mut rng, 64);
    let pairs = nonzero_values(&mut rng, 64);
    let halves: Vec<u32> = pairs.chunks(2).map(|p| f16::from_f32(p[0]).to_bits() as u32 | (f16::from_f32(p[1]).to_bits() as u32) << 16).collect();
    let init = [0.5f32, -1.25, 2.0, 3.5];
    let counter = 0x1234_5678u32;
    let vals_d = DeviceBuffer::from_slice(&vals).unwrap();
    let halves_d = DeviceBuffer::from_slice(&halves).unwrap();
    let counter_d = DeviceBuffer::from_slice(&[counter]).unwrap();
    let out_d = DeviceBuffer::from_slice(&[f32::NAN; 139]).unwrap();
    let accum_d = DeviceBuffer::from_slice(&init).unwrap();
    unsafe {
        launch!(module.probe_backward_atoms<<<1, 64, 256, stream>>>(
            vals_d.as_device_ptr(), halves_d.as_device_ptr(), counter_d.as_device_ptr(), out_d.as_device_ptr(), accum_d.as_device_ptr()
        ))
        .unwrap();
    }
    stream.synchronize().unwrap();
    let mut out = [0f32; 139];
    out_d.copy_to(&mut out[..]).unwrap();
    let mut accum = [0f32; 4];
    accum_d.copy_to(&mut accum[..]).unwrap();
    for w in 0..2 {
        let want: f64 = vals[32 * w..32 * w + 32].iter().map(|&x| x as f64).sum();
        assert!((out[w] as f64 - want).abs() < 1e-4, "warp {w} sum {} != {want}", out[w]);
    }
    for g in 0..8 {
        let want: f64 = vals[8 * g..8 * g + 8].iter().map(|&x| x as f64).sum();
        assert!((out[131 + g] as f64 - want).abs() < 1e-5, "group {g} sum {} != {want}", out[131 + g]);
    }
    for i in 0..64 {
        assert_eq!(out[2 + i], f16::from_f32(pairs[i]).to_f32(), "half {i}");
    }
    for t in 0..64 {
        let s = (t + 1) % 64;
        let want = if s % 3 != 0 { vals[s] } else { 0.0 };
        assert_eq!(out[66 + t], want, "cp.async slot {s}");
    }
    for j in 0..4 {
        let want = init[j] as f64 + (0..64).filter(|t| t % 4 == j).map(|t| vals[t] as f64).sum::<f64>();
        assert!((accum[j] as f64 - want).abs() < 1e-4, "red.add slot {j}: {} != {want}", accum[j]);
    }
    assert_eq!(out[130].to_bits(), counter);
}

#[test]
fn probe_barrier_red() {
    let Some(gpu) = gpu_or_skip("probe_barrier_red") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    // Votes: none, one (in the last warp), all, all but one (in the first warp), every other.
    let patterns: [Vec<u32>; 5] = [vec![0; 256], (0..256).map(|t| (t == 200) as u32).collect(), vec![3; 256], (0..256).map(|t| (t != 7) as u32).collect(), (0..256).map(|t| t % 2).collect()];
    for votes in patterns {
        let want = votes.iter().filter(|&&v| v != 0).count() as u32;
        let flags_d = DeviceBuffer::from_slice(&votes).unwrap();
        let out_d = DeviceBuffer::from_slice(&[u32::MAX; 256]).unwrap();
        unsafe {
            launch!(module.probe_barrier_red<<<1, 256, 0, stream>>>(flags_d.as_device_ptr(), out_d.as_device_ptr())).unwrap();
        }
        stream.synchronize().unwrap();
        let mut out = [0u32; 256];
        out_d.copy_to(&mut out[..]).unwrap();
        assert!(out.iter().all(|&n| n == want), "counts {:?} for {want} true votes", &out[..8]);
    }
}

#[test]
fn probe_ballot_or() {
    let Some(gpu) = gpu_or_skip("probe_ballot_or") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    // Flags: the votes (nonzero), and each warp's least of them for the reduction.
    let patterns: [Vec<u32>; 5] = [vec![0; 64], vec![1; 64], (0..64).map(|t| (t % 3 == 0) as u32).collect(), (0..64).map(|t| (t == 31 || t == 32) as u32).collect(), (0..64).map(|t| 1000 - 7 * t as u32 % 50).collect()];
    for votes in patterns {
        let word = |w: usize| (0..32).filter(|&l| votes[32 * w + l] != 0).fold(0u32, |b, l| b | 1 << l);
        let flags_d = DeviceBuffer::from_slice(&votes).unwrap();
        // Bits already set stay set.
        let bits_d = DeviceBuffer::from_slice(&[0x100u32, 0]).unwrap();
        let out_d = DeviceBuffer::from_slice(&[u32::MAX; 128]).unwrap();
        unsafe {
            launch!(module.probe_ballot_or<<<1, 64, 0, stream>>>(flags_d.as_device_ptr(), bits_d.as_device_ptr(), out_d.as_device_ptr())).unwrap();
        }
        stream.synchronize().unwrap();
        let (mut bits, mut out) = ([0u32; 2], [0u32; 128]);
        bits_d.copy_to(&mut bits[..]).unwrap();
        out_d.copy_to(&mut out[..]).unwrap();
        assert_eq!(bits, [word(0) | 0x100, word(1)]);
        assert!((0..64).all(|t| out[t] == word(t / 32)), "ballots {:x?}", &out[..64]);
        let least = |w: usize| *votes[32 * w..32 * w + 32].iter().min().unwrap();
        assert!((0..64).all(|t| out[64 + t] == least(t / 32)), "minima {:?}", &out[64..]);
    }
}

#[test]
fn probe_red_vector() {
    let Some(gpu) = hopper_or_skip("probe_red_vector") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0xb03);
    for (width, n) in [2u32, 4].into_iter().flat_map(|w| [4usize, 100, 1024].map(move |n| (w, n))) {
        let src = nonzero_values(&mut rng, n);
        let dst0 = nonzero_values(&mut rng, n + 4);
        let src_d = DeviceBuffer::from_slice(&src).unwrap();
        let dst_d = DeviceBuffer::from_slice(&dst0).unwrap();
        for _ in 0..2 {
            unsafe {
                launch!(module.probe_red_vector<<<1, 128, 0, stream>>>(src_d.as_device_ptr(), dst_d.as_device_ptr(), n as u32, width)).unwrap();
            }
        }
        stream.synchronize().unwrap();
        let mut dst = vec![0f32; n + 4];
        dst_d.copy_to(&mut dst[..]).unwrap();
        for i in 0..n + 4 {
            // Twice within n, nothing past it.
            let want = if i < n { (dst0[i] + src[i]) + src[i] } else { dst0[i] };
            assert_eq!(dst[i], want, "element {i} of {n}, {width} at a time");
        }
    }
}

#[test]
fn probe_bulk_copy() {
    let Some(gpu) = hopper_or_skip("probe_bulk_copy") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0xb02);
    for n in [4usize, 128, 1024] {
        let src = nonzero_values(&mut rng, n + 8);
        let src_d = DeviceBuffer::from_slice(&src).unwrap();
        let dst_d = DeviceBuffer::from_slice(&vec![0f32; n + 4]).unwrap();
        // From the second 16-byte chunk on, so that the copy starts off the allocation's base.
        let from = unsafe { src_d.as_device_ptr().add(4) };
        unsafe {
            launch!(module.probe_bulk_copy<<<1, 128, 4096 + 16, stream>>>(from, dst_d.as_device_ptr(), n as u32)).unwrap();
        }
        stream.synchronize().unwrap();
        let mut dst = vec![0f32; n + 4];
        dst_d.copy_to(&mut dst[..]).unwrap();
        assert_eq!(&dst[..n], &src[4..n + 4], "copy of {n}");
        // Past n nothing is written.
        assert!(dst[n..].iter().all(|&x| x == 0.0), "past {n}");
    }
}

#[test]
fn probe_stmatrix() {
    let Some(gpu) = hopper_or_skip("probe_stmatrix") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let mut rng = StdRng::seed_from_u64(0x57a);
    let inp: Vec<u32> = (0..128).map(|_| rng.random_range(1..=u32::MAX)).collect();
    let inp_d = DeviceBuffer::from_slice(&inp).unwrap();
    let out_d = DeviceBuffer::from_slice(&[0u32; 128]).unwrap();
    unsafe {
        launch!(module.probe_stmatrix<<<1, 32, 512, stream>>>(inp_d.as_device_ptr(), out_d.as_device_ptr())).unwrap();
    }
    stream.synchronize().unwrap();
    let mut out = [0u32; 128];
    out_d.copy_to(&mut out[..]).unwrap();
    for (i, r, q) in (0..4).flat_map(|i| (0..8).flat_map(move |r| (0..4).map(move |q| (i, r, q)))) {
        assert_eq!(out[4 * (8 * i + 7 - r) + q], inp[4 * (4 * r + q) + i], "matrix {i} row {r} word {q}");
    }
}

#[test]
fn probe_fp8_widen() {
    let Some(gpu) = gpu_or_skip("probe_fp8_widen") else { return };
    let module = probe_module(&gpu);
    let stream = stream();
    let bytes: Vec<u32> = (0..64u32).map(|i| u32::from_le_bytes([4 * i as u8, 4 * i as u8 + 1, 4 * i as u8 + 2, 4 * i as u8 + 3])).collect();
    let src_d = DeviceBuffer::from_slice(&bytes).unwrap();
    let out_d = DeviceBuffer::from_slice(&[0xdead_beefu32; 1024]).unwrap();
    unsafe {
        launch!(module.probe_fp8_widen<<<1, 64, 0, stream>>>(src_d.as_device_ptr(), out_d.as_device_ptr())).unwrap();
    }
    stream.synchronize().unwrap();
    let mut out = [0u32; 1024];
    out_d.copy_to(&mut out[..]).unwrap();
    let halves: Vec<u16> = out.iter().flat_map(|w| [*w as u16, (*w >> 16) as u16]).collect();
    // Thread t's byte j (value 4t + j) lands at element 4t + j of a halves block, and at 4t +
    // [0, 2, 1, 3][j] of an interleaved one.
    for (block, (fmt, is_bf16)) in [(flashrs::Fp8::E4m3, false), (flashrs::Fp8::E4m3, true), (flashrs::Fp8::E5m2, false), (flashrs::Fp8::E5m2, true)].into_iter().enumerate() {
        for b in 0..=255usize {
            let want = flashrs::element::fp8_to_f32(fmt, b as u8);
            let interleaved = 4 * (b / 4) + [0, 2, 1, 3][b % 4];
            for (at, how) in [(block * 256 + b, "halves"), ((block + 4) * 256 + interleaved, "interleaved")] {
                let bits = halves[at];
                let got = if is_bf16 { bf16::from_bits(bits).to_f32() } else { f16::from_bits(bits).to_f32() };
                // Exact, signed zeros and NaN included.
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{fmt:?} {b:#04x} to {} ({how}): {got} != {want}", if is_bf16 { "bf16" } else { "f16" });
            }
        }
    }
}
