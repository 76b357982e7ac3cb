//! Property test of the backward planner (`AttentionParams::plan_backward`), CPU only.
//!
//! Seeded random fixed-length calls (`FLASHRS_SEED` replays them; a failure names its case and
//! seed): head dims 8 to 256 (V's equal or of its own), causal or not, GQA and MQA, deterministic or not, lengths from 1 to
//! a few thousand, each planned for every target of `Target::PRESETS` with the automatic
//! choice and with `mma.sync` forced. Every plan is checked against an independent model: the
//! kernel family and tile the selection rules name (the Hopper kernel for any fixed-length call
//! on sm_90a unless `mma.sync` is forced, with 128 keys a CTA, 64 at head_dim 256), grids,
//! the workspace's parts and the parameters' untruncated values. Variable-length calls (host
//! offsets, sequences from 0 rows) likewise, the Hopper kernel's blocks padded per sequence. A
//! gradient that overlaps an input or another gradient is a typed error.
use flashrs::{
    AccumLayout, Arch, AttentionParams, BufferRef, Buffers, BwdStep, DType, Error, GradBuffers, Kernel, KernelChoice, Target,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One random call's shape.
#[derive(Clone, Copy, Debug)]
struct Shape {
    batch: usize,
    seqlen_q: usize,
    seqlen_k: usize,
    heads_q: usize,
    heads_kv: usize,
    head_dim: usize,
    /// V's, dO's and dV's head dimension.
    head_dim_v: usize,
    causal: bool,
    deterministic: bool,
}

impl Shape {
    fn random(rng: &mut StdRng) -> Shape {
        let heads_kv = rng.random_range(1..=4);
        let len = |rng: &mut StdRng| if rng.random_bool(0.3) { rng.random_range(1..=130) } else { rng.random_range(1..=3000) };
        let head_dim = 8 * rng.random_range(1..=32);
        Shape {
            batch: rng.random_range(1..=4),
            seqlen_q: len(rng),
            seqlen_k: len(rng),
            heads_q: heads_kv * [1, 2, 4, 8][rng.random_range(0..4)],
            heads_kv,
            head_dim,
            head_dim_v: if rng.random_bool(0.3) { 8 * rng.random_range(1..=32) } else { head_dim },
            causal: rng.random_bool(0.5),
            deterministic: rng.random_bool(0.3),
        }
    }

    fn params(&self, kernel: KernelChoice) -> AttentionParams<'static> {
        let s = *self;
        AttentionParams::builder()
            .batch(s.batch)
            .seqlen_q(s.seqlen_q)
            .seqlen_k(s.seqlen_k)
            .heads_q(s.heads_q)
            .heads_kv(s.heads_kv)
            .head_dim(s.head_dim)
            .head_dim_v(s.head_dim_v)
            .causal(s.causal)
            .deterministic(s.deterministic)
            .kernel(kernel)
            .build()
            .expect("a valid shape")
    }

    fn q_len(&self) -> usize {
        self.batch * self.seqlen_q * self.heads_q * self.head_dim
    }

    fn kv_len(&self) -> usize {
        self.batch * self.seqlen_k * self.heads_kv * self.head_dim
    }

    /// V's and dV's elements.
    fn v_len(&self) -> usize {
        self.batch * self.seqlen_k * self.heads_kv * self.head_dim_v
    }

    /// The output's and dO's elements.
    fn o_len(&self) -> usize {
        self.batch * self.seqlen_q * self.heads_q * self.head_dim_v
    }

    /// The head dimension the kernels are padded to: the wider of the two, padded.
    fn padded(&self) -> usize {
        padded(self.head_dim.max(self.head_dim_v))
    }
}

/// Separate buffers of exactly the call's sizes, far apart; `alias` points buffer `alias.0`
/// (in the order q, k, v, o, lse, dout, dq, dk, dv) at buffer `alias.1`'s address.
fn buffers(s: &Shape, alias: Option<(usize, usize)>) -> (Buffers, GradBuffers) {
    let lens = [s.q_len(), s.kv_len(), s.v_len(), s.o_len(), s.batch * s.heads_q * s.seqlen_q, s.o_len(), s.q_len(), s.kv_len(), s.v_len()];
    let stride = (lens.iter().max().unwrap() * 4).next_multiple_of(1 << 20) as u64;
    let at = |i: usize| {
        let slot = alias.filter(|&(a, _)| a == i).map_or(i, |(_, b)| b);
        BufferRef::new((1 << 32) + slot as u64 * stride, lens[i])
    };
    let bufs = Buffers::new(DType::Bf16, at(0), at(1), at(2), at(3)).lse(at(4));
    (bufs, GradBuffers::new(at(5), at(6), at(7), at(8)))
}

/// The padded head dimension the kernels are built for.
fn padded(d: usize) -> usize {
    [64, 128, 256].into_iter().find(|&p| d <= p).expect("head_dim <= 256")
}

/// Checks one accepted plan against the model; `Err` names what differs.
/// CTAs of 256 threads the row kernels need for `slots` (row, head) pairs: a lane per 16-byte
/// chunk of a row, a power of two of them and at most 16 (two chunks a lane past 128 columns),
/// so that 4 rows share a warp at head_dim 64 and 2 at 256. `head_dim`: the wider of the row's
/// (dQ's head_dim, dO's head_dim_v).
fn row_ctas(slots: usize, head_dim: usize) -> usize {
    let lanes = match head_dim.div_ceil(8) {
        1 => 1,
        2 => 2,
        3..=4 => 4,
        5..=8 => 8,
        _ => 16,
    };
    (slots * lanes).div_ceil(256)
}

/// The Hopper backward's (query rows a step, keys a CTA) at padded head dim `pd`: two consumer
/// warpgroups of 64 keys each, or at 256 both on the same 64 (a 64 x 256 dK and dV do not fit
/// one warpgroup's registers); 128-row steps at 64 (the warpgroups split dQ by rows).
fn hopper_tile(pd: usize) -> (usize, usize) {
    match pd {
        64 => (128, 128),
        128 => (64, 128),
        _ => (64, 64),
    }
}

fn check(s: &Shape, kernel: KernelChoice, t: &Target) -> Result<(), String> {
    let (bufs, grads) = buffers(s, None);
    let plan = s.params(kernel).plan_backward(&bufs, &grads, t).map_err(|e| format!("rejected: {e}"))?;
    let pd = s.padded();
    let hopper = t.arch == Arch::Sm90a && kernel == KernelChoice::Auto;
    let (bm, bn, layout) = match plan.kernels[1] {
        Kernel::Bwd { step: BwdStep::MainSm90 { config: c, varlen: false, .. }, .. } if hopper => {
            // Two consumer warpgroups of 64 keys, or at 256 both on the same 64 (a 64 x 256 dK
            // and dV do not fit one warpgroup's registers).
            let (bm, bn) = hopper_tile(pd);
            if (c.head_dim, c.block_m, c.block_n()) != (pd, bm, bn) {
                return Err(format!("Hopper tile {c:?}, want head_dim {pd}, {bm} x {bn}"));
            }
            (bm, bn, AccumLayout::Fragments)
        }
        Kernel::Bwd { step: BwdStep::Main { config: c, accum, .. }, .. } if !hopper => {
            if c.head_dim != pd || c.smem_bytes() > t.max_smem_per_block as usize {
                return Err(format!("mma.sync tile {c:?} for head_dim {pd} and {} bytes of shared memory", t.max_smem_per_block));
            }
            // sm_90a adds dQ with 16-byte vector reductions, in fragment order, up to head_dim
            // 128 (at 256 its registers go to dK and dV).
            let want = if t.arch == Arch::Sm90a && pd <= 128 { AccumLayout::Fragments } else { AccumLayout::Rows };
            if accum != want {
                return Err(format!("mma.sync accumulator {accum:?} on {:?}, want {want:?}", t.arch));
            }
            (c.block_m, c.block_n, accum)
        }
        k => return Err(format!("main kernel {k:?}, want {}", if hopper { "Hopper" } else { "mma.sync" })),
    };
    let want_steps = [BwdStep::Prep(layout), BwdStep::Dq(layout)];
    let steps = [plan.kernels[0], plan.kernels[2]].map(|k| match k {
        Kernel::Bwd { step, dtype: DType::Bf16 } => Some(step),
        _ => None,
    });
    if steps != want_steps.map(Some) {
        return Err(format!("prep and dQ kernels {:?}, want {want_steps:?}", [plan.kernels[0], plan.kernels[2]]));
    }
    let (m_blocks, n_blocks) = (s.seqlen_q.div_ceil(bm), s.seqlen_k.div_ceil(bn));
    // The row kernels' rows per head: the log-sum-exp's, or (fragment order) padded to whole
    // steps.
    let row_count = match layout {
        AccumLayout::Rows => s.batch * s.seqlen_q,
        AccumLayout::Fragments => s.batch * m_blocks * bm,
    };
    let rows = s.batch * s.seqlen_q * s.heads_q;
    let row_ctas = row_ctas(row_count * s.heads_q, s.head_dim.max(s.head_dim_v));
    let grids = [row_ctas, s.batch * s.heads_kv * n_blocks, row_ctas].map(|g| g as u32);
    if plan.grids != grids {
        return Err(format!("grids {:?}, want {grids:?}", plan.grids));
    }
    // The f32 accumulator: per query row and head a padded row, or (fragment order) 64-row
    // blocks and a padding block; then the row statistics (dsum, or per block 64 log-sum-exp bases and 64 dsums,
    // and one padding block); then the deterministic mode's counters, one per (batch, head,
    // query block), or (fragment order) per 64-row block.
    let blocks = s.batch * s.heads_q * s.seqlen_q.div_ceil(64);
    let (accum, stats, counters) = match layout {
        AccumLayout::Rows => (rows * pd, rows, s.batch * s.heads_q * m_blocks),
        AccumLayout::Fragments => ((blocks + 1) * 64 * pd, (blocks + 1) * 128, blocks),
    };
    let counters = if s.deterministic { counters } else { 0 };
    let at_least = 4 * (accum + stats + counters);
    if plan.params.accum_len != accum as u64 || plan.workspace_bytes < at_least || plan.workspace_bytes > at_least + 64 {
        return Err(format!("accumulator {} values, workspace {} bytes; want {accum} values, {at_least}..+64 bytes", plan.params.accum_len, plan.workspace_bytes));
    }
    let p = &plan.params;
    let f = &p.fwd;
    let got = [f.batch, f.seqlen_q, f.seqlen_k, f.heads_q, f.group, f.head_dim, f.head_dim_v, f.causal, f.m_blocks, p.n_blocks, p.accum_dim, p.rows];
    let want = [s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_q / s.heads_kv, s.head_dim, s.head_dim_v, s.causal as usize, m_blocks, n_blocks, pd, row_count]
        .map(|x| x as u32);
    if got != want {
        return Err(format!("parameters (batch, seqlen_q, seqlen_k, heads_q, group, head_dim, head_dim_v, causal, m_blocks, n_blocks, accum_dim, rows) {got:?}, want {want:?}"));
    }
    if plan.deterministic != s.deterministic || (p.scale - 1.0 / (s.head_dim as f32).sqrt()).abs() > 1e-6 {
        return Err(format!("deterministic {}, scale {}", plan.deterministic, p.scale));
    }
    Ok(())
}

#[test]
fn backward_plans_match_the_model() {
    let seed = std::env::var("FLASHRS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xbac4);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut hopper = 0;
    for case in 0..600 {
        let s = Shape::random(&mut rng);
        for t in &Target::PRESETS {
            for kernel in [KernelChoice::Auto, KernelChoice::MmaSync { config: None }] {
                // Head dim 256 needs more shared memory than the 99 KB GPUs give the mma.sync
                // kernel: a typed error there, not a plan.
                let (bufs, grads) = buffers(&s, None);
                let fits = !(s.padded() == 256 && t.max_smem_per_block < 160 * 1024);
                if !fits {
                    let e = s.params(kernel).plan_backward(&bufs, &grads, t);
                    assert!(matches!(e, Err(Error::SharedMemory { .. })), "case {case} (seed {seed}) {s:?} on {t:?}: {e:?}");
                    continue;
                }
                if let Err(why) = check(&s, kernel, t) {
                    panic!("case {case} (seed {seed}) {s:?}, {kernel:?} on {:?} {:?}: {why}", t.arch, t.compute_capability);
                }
                hopper += (t.arch == Arch::Sm90a && kernel == KernelChoice::Auto) as usize;
            }
        }
    }
    assert_eq!(hopper, 600, "every case planned once for the H100's Hopper kernel");
}

#[test]
fn gradients_overlapping_anything_are_typed_errors() {
    let seed = std::env::var("FLASHRS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xa11a5);
    let mut rng = StdRng::seed_from_u64(seed);
    for case in 0..200 {
        let s = Shape::random(&mut rng);
        // A gradient (dq, dk, dv) at another buffer's address, or dO at a gradient's.
        let (w, other) = match rng.random_range(0..4) {
            0 => (6, rng.random_range(0..6)),
            1 => (7, [0, 1, 2, 3, 5, 6][rng.random_range(0..6)]),
            2 => (8, [0, 1, 2, 3, 5, 7][rng.random_range(0..6)]),
            _ => (5, rng.random_range(6..9)),
        };
        let (bufs, grads) = buffers(&s, Some((w, other)));
        let t = Target::PRESETS[rng.random_range(0..4)];
        if s.padded() == 256 && t.max_smem_per_block < 160 * 1024 {
            continue;
        }
        match s.params(KernelChoice::Auto).plan_backward(&bufs, &grads, &t) {
            Err(Error::InvalidBuffer { .. }) => {}
            r => panic!("case {case} (seed {seed}) {s:?}: buffer {w} at buffer {other}'s address planned as {r:?}"),
        }
    }
}

/// One random variable-length call: per sequence (query rows, key rows), from 0.
fn random_lengths(rng: &mut StdRng) -> Vec<(usize, usize)> {
    let len = |rng: &mut StdRng| if rng.random_bool(0.15) { 0 } else if rng.random_bool(0.4) { rng.random_range(1..=70) } else { rng.random_range(1..=700) };
    (0..rng.random_range(1..=6)).map(|_| (len(rng), len(rng))).collect()
}

#[test]
fn variable_length_backward_plans_match_the_model() {
    let seed = std::env::var("FLASHRS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7a41e);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut hopper = 0;
    for case in 0..300 {
        let lens = random_lengths(&mut rng);
        let cu = |f: fn(&(usize, usize)) -> usize| std::iter::once(0).chain(lens.iter().scan(0, |a, l| { *a += f(l); Some(*a as i32) })).collect::<Vec<i32>>();
        let (cq, ck) = (cu(|l| l.0), cu(|l| l.1));
        let (total_q, total_k) = (*cq.last().unwrap() as usize, *ck.last().unwrap() as usize);
        let (max_q, max_k) = (lens.iter().map(|l| l.0).max().unwrap(), lens.iter().map(|l| l.1).max().unwrap());
        let heads_kv = rng.random_range(1..=4);
        let heads_q = heads_kv * [1, 2, 4][rng.random_range(0..3)];
        let head_dim = 8 * rng.random_range(1..=32);
        let (causal, deterministic) = (rng.random_bool(0.5), rng.random_bool(0.3));
        let p = AttentionParams::builder().heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).causal(causal).deterministic(deterministic).varlen(&cq, &ck).build().unwrap();
        let (q, k) = ((total_q * heads_q * head_dim).max(1), (total_k * heads_kv * head_dim).max(1));
        let at = |i: u64, len: usize| BufferRef::new((1 << 32) + i * (1 << 28), len);
        let bufs = Buffers::new(DType::Bf16, at(0, q), at(1, k), at(2, k), at(3, q)).lse(at(4, (total_q * heads_q).max(1)));
        let grads = GradBuffers::new(at(5, q), at(6, q), at(7, k), at(8, k));
        let pd = padded(head_dim);
        for t in &Target::PRESETS {
            if pd == 256 && t.max_smem_per_block < 160 * 1024 {
                continue;
            }
            let why = |what: String| format!("case {case} (seed {seed}) {lens:?} heads {heads_q}/{heads_kv} d{head_dim} on {:?}: {what}", t.arch);
            let plan = p.plan_backward(&bufs, &grads, t).unwrap_or_else(|e| panic!("{}", why(format!("rejected: {e}"))));
            if total_q == 0 && total_k == 0 {
                assert!(plan.is_empty());
                continue;
            }
            // With no query row there are only zero dK and dV to write: mma.sync's kernel does.
            let on_hopper = t.arch == Arch::Sm90a && total_q > 0;
            let (bn, accum, stats, counters, row_count) = match plan.kernels[1] {
                Kernel::Bwd { step: BwdStep::MainSm90 { config: c, varlen: true, .. }, .. } if on_hopper => {
                    let (bm, bn) = hopper_tile(pd);
                    assert_eq!((c.block_m, c.block_n()), (bm, bn), "{}", why(format!("Hopper tile {c:?}")));
                    // Every sequence's blocks padded to 64 rows: at most total / 64 + batch a head,
                    // and one padding block of statistics. The row kernels walk every sequence
                    // padded to the longest's steps.
                    let blocks = heads_q * (total_q / 64 + lens.len());
                    (bn, (blocks + 1) * 64 * pd, (blocks + 1) * 128, blocks, lens.len() * max_q.div_ceil(bm) * bm)
                }
                Kernel::Bwd { step: BwdStep::Main { config: c, accum, .. }, .. } if !on_hopper => {
                    if t.arch == Arch::Sm90a && pd <= 128 {
                        // Fragment order, as the Hopper kernel's.
                        assert_eq!(accum, AccumLayout::Fragments, "{}", why("mma.sync accumulator".into()));
                        let blocks = heads_q * (total_q / 64 + lens.len());
                        (c.block_n, (blocks + 1) * 64 * pd, (blocks + 1) * 128, blocks, lens.len() * max_q.div_ceil(c.block_m) * c.block_m)
                    } else {
                        assert_eq!(accum, AccumLayout::Rows, "{}", why("mma.sync accumulator".into()));
                        (c.block_n, total_q * heads_q * pd, total_q * heads_q, lens.len() * heads_q * max_q.div_ceil(c.block_m), total_q)
                    }
                }
                k => panic!("{}", why(format!("main kernel {k:?}"))),
            };
            let counters = if deterministic { counters } else { 0 };
            let rows = row_ctas(row_count * heads_q, head_dim) as u32;
            let main = (lens.len() * heads_kv * max_k.div_ceil(bn)) as u32;
            let grids = if total_q > 0 { [rows, main, rows] } else { [0, main, 0] };
            if plan.grids != grids {
                panic!("{}", why(format!("grids {:?}, want {grids:?}", plan.grids)));
            }
            let at_least = 4 * (accum + stats + counters);
            if plan.params.accum_len != accum as u64 || plan.workspace_bytes < at_least || plan.workspace_bytes > at_least + 64 {
                panic!("{}", why(format!("accumulator {} values, workspace {} bytes; want {accum}, {at_least}..+64", plan.params.accum_len, plan.workspace_bytes)));
            }
            let f = &plan.params.fwd;
            let got = [f.batch, f.seqlen_q, f.seqlen_k, f.total_q, f.total_k, plan.params.rows].map(|x| x as usize);
            if got != [lens.len(), max_q, max_k, total_q, total_k, row_count] {
                panic!("{}", why(format!("(batch, seqlen_q, seqlen_k, total_q, total_k, rows) {got:?}")));
            }
            if plan.upload.as_deref() != Some(&[cq.as_slice(), ck.as_slice()].concat()[..]) {
                panic!("{}", why(format!("uploads {:?}", plan.upload)));
            }
            hopper += on_hopper as usize;
        }
    }
    assert!(hopper > 250, "{hopper} cases planned for the H100's Hopper kernel");
}

/// Block-sparse calls: random masks (per batch entry or shared, per head or shared, with spare
/// query and key blocks) over random fixed-length shapes. Each plans the block-sparse twin of
/// the Hopper kernel on sm_90a (unless `mma.sync` is forced), else of the `mma.sync`
/// modification kernels, the first of their table that fits; and before it the two list
/// launches: a CTA per
/// row of the mask, a warp per 32 key blocks of each (batch entry, K/V head). The lists take, after
/// the workspace's counters, a bitmap of the mask's key blocks per mask row, a count per (batch
/// entry, K/V head, 128-key block), and per count an entry for each of the group's query steps
/// (twice that in deterministic mode, for the turns), each part on 16 bytes.
#[test]
fn block_sparse_backward_plans_match_the_model() {
    use flashrs::abi::bwd::{BWD_CONFIGS, BWD_MODS};
    use flashrs::{BlockMask, Flavor};
    let seed = std::env::var("FLASHRS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xb5a2);
    let mut rng = StdRng::seed_from_u64(seed);
    for case in 0..300 {
        let s = Shape::random(&mut rng);
        let (q_blocks, kv_blocks) = (s.seqlen_q.div_ceil(128) + rng.random_range(0..3), s.seqlen_k.div_ceil(128) + rng.random_range(0..70));
        let (mb, mh) = (if rng.random_bool(0.5) { 1 } else { s.batch }, if rng.random_bool(0.5) { 1 } else { s.heads_q });
        let rows = mb * mh * q_blocks;
        let array = |i: u64, n: usize| flashrs_tests::planning_index((1 << 45) + (i << 40), n);
        let mask = BlockMask { counts: array(0, rows), indices: array(1, rows * kv_blocks), full: None, batch: mb, heads: mh, q_blocks, kv_blocks };
        let (bufs, grads) = buffers(&s, None);
        let base = s.params(KernelChoice::Auto);
        let plain = base.plan_backward(&bufs, &grads, &Target::A100).unwrap();
        let mut p = base.clone();
        p.mods.blocks = Some(mask);
        for (t, kernel) in Target::PRESETS.iter().flat_map(|t| [(t, KernelChoice::Auto), (t, KernelChoice::MmaSync { config: None })]) {
            let why = |w: String| format!("case {case} (seed {seed}) {s:?} mask {mb}x{mh}x{q_blocks}x{kv_blocks} on {:?}, {kernel:?}: {w}", t.arch);
            let pd = s.padded();
            let hopper = t.arch == Arch::Sm90a && kernel == KernelChoice::Auto;
            let want = BWD_MODS.iter().map(|&i| BWD_CONFIGS[i]).find(|c| c.head_dim == pd && c.smem_bytes() <= t.max_smem_per_block as usize);
            let mut p = p.clone();
            p.kernel = kernel;
            let plan = match (p.plan_backward(&bufs, &grads, t), want) {
                (Ok(plan), Some(_)) => plan,
                (Ok(plan), None) if hopper => plan,
                (Err(Error::SharedMemory { .. }), None) => continue,
                (r, _) => panic!("{}", why(format!("{r:?}, want {want:?}"))),
            };
            let (bm, dtype) = match plan.kernels[1] {
                Kernel::Bwd { step: BwdStep::MainSm90 { config, varlen: false, flavor: Flavor::Sparse }, dtype } if hopper => {
                    assert_eq!((config.head_dim, config.block_m, config.block_n()), (pd, hopper_tile(pd).0, hopper_tile(pd).1), "{}", why("Hopper tile".into()));
                    (config.block_m, dtype)
                }
                Kernel::Bwd { step: BwdStep::Main { config, flavor: Flavor::Sparse, .. }, dtype } if !hopper => {
                    assert_eq!(Some(config), want, "{}", why("configuration".into()));
                    (config.block_m, dtype)
                }
                k => panic!("{}", why(format!("{k:?}"))),
            };
            let group = s.heads_q / s.heads_kv;
            let lists = s.seqlen_k.div_ceil(128);
            let l = plan.lists.clone().unwrap_or_else(|| panic!("{}", why("no lists".into())));
            let grids = [rows, s.batch * s.heads_kv * lists.div_ceil(32)].map(|g| g as u32);
            assert_eq!(l.kernels, [(Kernel::Bwd { dtype, step: BwdStep::SparseBits }, grids[0]), (Kernel::Bwd { dtype, step: BwdStep::SparseLists }, grids[1])], "{}", why("list launches".into()));
            let q = plan.params.lists;
            let per_list = group * s.seqlen_q.div_ceil(bm);
            assert_eq!([q.words, q.per_list, q.kv_blocks, q.block_m], [kv_blocks.div_ceil(32), per_list, lists, bm].map(|x| x as u32), "{}", why("lists".into()));
            let counts = s.batch * s.heads_kv * lists;
            let entries = counts * per_list;
            let parts = [rows * kv_blocks.div_ceil(32), counts, entries, if s.deterministic { entries } else { 0 }].map(|n| (4 * n).next_multiple_of(16));
            assert_eq!(l.bytes, parts, "{}", why("list parts".into()));
            assert!(l.offset % 16 == 0 && plan.workspace_bytes == l.offset + parts.iter().sum::<usize>(), "{}", why(format!("workspace {} from {}", plan.workspace_bytes, l.offset)));
            // The rest of the plan is the same call's without the mask (the Hopper kernel's), or
            // with a modification (the modification kernels', of the same tile).
            let mut other = base.clone();
            other.kernel = kernel;
            if !hopper {
                other.mods.softcap = Some(1.0);
            }
            let m = other.plan_backward(&bufs, &grads, t).unwrap();
            assert_eq!((plan.grids, l.offset), (m.grids, m.workspace_bytes), "{}", why("grids and workspace before the lists".into()));
        }
        assert!(plain.lists.is_none());
    }
}
