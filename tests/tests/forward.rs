//! Forward attention on the GPU against the CPU f64 reference, on every kernel path, over
//! dtype x head_dim x causal x GQA ratio x ragged lengths x layouts. Skips (saying so) where no
//! GPU is present.
use flashrs::tiles::CONFIGS;
use flashrs::{Arch, AttentionParamsBuilder, DType, DimOrder, Gpu, KernelChoice, KernelPath, Strides};
use flashrs_tests::{gpu_or_skip, params};

/// Checks `p` on `dtype` tensors on the mma.sync path (its forced configuration, if it has one)
/// and, where the GPU picks another path for it (wgmma on sm_90a), on that path too: every
/// semantic holds on every path.
fn check(gpu: &Gpu, p: AttentionParamsBuilder, dtype: DType) {
    let p = p.build().unwrap();
    if let KernelChoice::MmaSync { config: Some(_) } = p.kernel {
        return flashrs_tests::attn::check(gpu, &p, dtype);
    }
    flashrs_tests::attn::check(gpu, &p.to_builder().path(KernelPath::MmaSync).build().unwrap(), dtype);
    if gpu.arch() == Arch::Sm90a {
        flashrs_tests::attn::check(gpu, &p, dtype);
    }
}

const DTYPES: [DType; 2] = [DType::F16, DType::Bf16];

#[test]
fn every_head_dim_dtype_causal_and_gqa() {
    let Some(gpu) = gpu_or_skip("every_head_dim_dtype_causal_and_gqa") else { return };
    for dtype in DTYPES {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                for (sq, sk) in [(127, 300), (300, 127)] {
                    check(&gpu, params(2, sq, sk, 4, d).heads_kv(2).causal(causal), dtype);
                }
            }
        }
    }
}

#[test]
fn ragged_lengths() {
    let Some(gpu) = gpu_or_skip("ragged_lengths") else { return };
    let lens = [(1, 1), (17, 17), (1, 1037), (1037, 1), (127, 1037), (1037, 127), (1037, 1037), (17, 128), (128, 17)];
    for dtype in DTYPES {
        for (sq, sk) in lens {
            for causal in [false, true] {
                check(&gpu, params(1, sq, sk, 2, 128).causal(causal), dtype);
            }
        }
    }
}

#[test]
fn head_dims_that_are_padded() {
    let Some(gpu) = gpu_or_skip("head_dims_that_are_padded") else { return };
    for d in [8, 40, 72, 96, 160, 200, 248] {
        for causal in [false, true] {
            check(&gpu, params(1, 150, 190, 3, d).causal(causal), DType::F16);
        }
    }
}

#[test]
fn gqa_and_mqa_ratios() {
    let Some(gpu) = gpu_or_skip("gqa_and_mqa_ratios") else { return };
    for heads_kv in [1, 2, 4, 8] {
        check(&gpu, params(2, 200, 333, 8, 64).heads_kv(heads_kv).causal(true), DType::F16);
    }
}

#[test]
fn strided_layouts() {
    let Some(gpu) = gpu_or_skip("strided_layouts") else { return };
    let (b, s, h, d) = (2, 130, 4, 64);
    check(&gpu, params(b, s, s, h, d).dim_order(DimOrder::Bhsd), DType::F16);
    check(&gpu, params(b, s, s, h, d).dim_order(DimOrder::Bhsd).causal(true), DType::Bf16);
    // Q, K, V as views into one packed [b, s, 3, h, d] tensor; output with padded rows.
    let packed = Strides { batch: (s * 3 * h * d) as i64, row: (3 * h * d) as i64, head: d as i64 };
    let out = Strides { batch: (s * (h * d + 64)) as i64, row: (h * d + 64) as i64, head: d as i64 };
    check(&gpu, params(b, s, s, h, d).q_strides(packed).k_strides(packed).v_strides(packed).o_strides(out), DType::F16);
}

#[test]
fn every_tile_configuration() {
    let Some(gpu) = gpu_or_skip("every_tile_configuration") else { return };
    // Each configuration forced, as far as the GPU's shared memory takes it.
    for c in CONFIGS.into_iter().filter(|c| c.smem_bytes() <= gpu.max_shared_memory_per_block() as usize) {
        for dtype in DTYPES {
            for causal in [false, true] {
                check(&gpu, params(1, 333, 517, 2, c.head_dim).causal(causal).config(c), dtype);
            }
        }
    }
}

/// Causal grids run the query blocks of a few (batch, head) pairs together, heaviest first
/// (`FwdParams::interleave`). Here 7 pairs make groups of 4 (mma.sync) or 6 (wgmma, head_dim
/// 64) and a short one before them: a block the mapping skipped would stay NaN, one it mixed
/// up would hold another pair's rows. 256 keys keep the CPU reference cheap; the first rows
/// see none.
#[test]
fn causal_grids_whose_pairs_leave_a_short_group() {
    let Some(gpu) = gpu_or_skip("causal_grids_whose_pairs_leave_a_short_group") else { return };
    for (d, dtype) in [(64, DType::F16), (128, DType::Bf16)] {
        check(&gpu, params(1, 7680, 256, 7, d).causal(true), dtype);
    }
}

#[test]
fn no_keys_gives_zero_output_and_minus_inf_lse() {
    let Some(gpu) = gpu_or_skip("no_keys_gives_zero_output_and_minus_inf_lse") else { return };
    check(&gpu, params(1, 64, 0, 2, 64), DType::F16);
    // Causal with seqlen_q > seqlen_k: the first rows see no key.
    check(&gpu, params(2, 300, 40, 2, 128).causal(true), DType::F16);
}
