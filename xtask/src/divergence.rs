//! A build check for one way a kernel hangs: a warp-wide shuffle that only part of a warp
//! reaches.
//!
//! The device crate's shuffle wrappers are `options(pure, nomem)` inline assembly, so LLVM may
//! move a shuffle like arithmetic, down into the only branch that uses its result. Where that
//! branch depends on the thread (a column or row bound), a full-mask `shfl.sync` then runs in
//! part of a warp, and the warp waits for lanes that never come: a lane-0 broadcast of a
//! sequence extent sank into the epilogue's per-thread column test once, and the kernel hung at
//! head_dims below the padded one only.
//!
//! The check is a taint analysis over each entry's PTX, run to a fixed point over its
//! instructions in order (so loop-carried values are covered):
//!
//! * registers derived from `%tid` or `%laneid` are thread-dependent, and so is every
//!   instruction's result with a thread-dependent source, a butterfly or up/down shuffle's
//!   result, and a load through a thread-dependent address;
//! * a `shfl.sync.idx` from a lane that is not thread-dependent is a broadcast: its result is
//!   warp-uniform whatever its value operand (the kernels rely on exactly that);
//! * a forward conditional branch on a thread-dependent predicate makes the instructions it
//!   skips, up to the next label (where control may rejoin), divergent; a shuffle there, or a
//!   shuffle predicated on such a predicate, is reported.
//!
//! Shuffles deeper in a divergent region (past a label) are not seen: this catches the way the
//! hang happened, not every way one could.

/// Where a kernel runs a shuffle in thread-dependent control flow: `entry: line` for each, the
/// line as the PTX has it.
pub fn divergent_shuffles(ptx: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = ptx.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = entry_name(lines[i]) else {
            i += 1;
            continue;
        };
        let end = (i..lines.len()).find(|&j| lines[j] == "}").unwrap_or(lines.len());
        for site in scan(&lines[i..end]) {
            out.push(format!("{name}: {}", site.trim()));
        }
        i = end;
    }
    out
}

/// The entry a line declares, if it does.
fn entry_name(line: &str) -> Option<&str> {
    let rest = line.split(".entry ").nth(1)?;
    Some(rest.split('(').next().unwrap_or(rest).trim())
}

/// One instruction: its predicate register (if guarded), opcode, destination registers and
/// source registers.
struct Instr<'a> {
    guard: Option<&'a str>,
    op: &'a str,
    dst: Vec<&'a str>,
    src: Vec<&'a str>,
    text: &'a str,
}

/// Registers (`%r12`, `%rd3`, `%p7`, ...) in `s`, in order.
fn registers(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    let mut k = 0;
    while k < bytes.len() {
        if bytes[k] == b'%' {
            let start = k;
            k += 1;
            while k < bytes.len() && bytes[k].is_ascii_alphabetic() {
                k += 1;
            }
            let letters = k;
            while k < bytes.len() && bytes[k].is_ascii_digit() {
                k += 1;
            }
            if k > letters && letters > start + 1 {
                out.push(&s[start..k]);
            }
        } else {
            k += 1;
        }
    }
    out
}

/// The instruction on `line`, if it holds one (not a label, directive or comment).
fn instr(line: &str) -> Option<Instr<'_>> {
    let s = line.trim();
    if s.is_empty() || s.starts_with("//") || s.starts_with('$') || s.starts_with('.') || s.starts_with('{') || s.starts_with('}') {
        return None;
    }
    let s = s.strip_suffix(';')?;
    let (guard, s) = match s.strip_prefix('@') {
        Some(g) => {
            let (p, rest) = g.split_once(char::is_whitespace)?;
            (Some(p.trim_start_matches('!')), rest.trim_start())
        }
        None => (None, s),
    };
    let (op, args) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
    let args = args.trim();
    // Stores, reductions, copies and synchronisation write no register the analysis follows.
    let writes = !["st.", "red.", "cp.", "mbarrier.", "barrier.", "bar.", "fence.", "bra", "ret", "wgmma."].iter().any(|p| op.starts_with(p));
    let (dst, src) = if !writes {
        (Vec::new(), registers(args))
    } else if let Some(group) = args.strip_prefix('{') {
        let (inside, rest) = group.split_once('}').unwrap_or((group, ""));
        (registers(inside), registers(rest))
    } else {
        let regs = registers(args);
        match regs.split_first() {
            Some((d, rest)) => (vec![*d], rest.to_vec()),
            None => (Vec::new(), Vec::new()),
        }
    };
    Some(Instr { guard, op, dst, src, text: line })
}

/// The reported lines of one entry's body.
fn scan<'a>(body: &[&'a str]) -> Vec<&'a str> {
    let code: Vec<(usize, Instr)> = body.iter().enumerate().filter_map(|(k, l)| instr(l).map(|i| (k, i))).collect();
    let mut thread = std::collections::HashSet::new();
    loop {
        let before = thread.len();
        for (_, ins) in &code {
            let dependent = if ins.op.starts_with("shfl.sync.idx") {
                // A broadcast: thread-dependent only through the lane it reads.
                ins.src.get(1).is_some_and(|lane| thread.contains(lane))
            } else if ins.op.starts_with("shfl.sync") {
                true
            } else {
                ins.text.contains("%tid") || ins.text.contains("%laneid") || ins.src.iter().any(|r| thread.contains(r))
            };
            if dependent {
                thread.extend(ins.dst.iter().copied());
            }
        }
        if thread.len() == before {
            break;
        }
    }
    let mut out = Vec::new();
    for (n, (k, ins)) in code.iter().enumerate() {
        let divergent_guard = ins.guard.is_some_and(|p| thread.contains(p));
        if ins.op.starts_with("shfl.sync") && divergent_guard {
            out.push(ins.text);
        }
        if ins.op.starts_with("bra") && divergent_guard {
            // The instructions the branch skips, up to the next label.
            let next_label = body[k + 1..].iter().position(|l| l.trim().starts_with('$')).map_or(body.len(), |p| k + 1 + p);
            if let Some((_, s)) = code[n + 1..].iter().take_while(|(j, _)| *j < next_label).find(|(_, s)| s.op.starts_with("shfl.sync")) {
                out.push(s.text);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the hang: a lane-0 broadcast inside the skipped side of a per-thread column
    /// test.
    const SUNK: &str = ".visible .entry flash_k(\n)\n{\n\tmov.u32 \t%r1, %tid.x;\n\tand.b32 \t%r2, %r1, 15;\n\tld.param.b32 \t%r4, [flash_k_param_0+8];\n\tsetp.ge.u32 \t%p1, %r2, %r4;\n\t@%p1 bra \t$L__BB0_2;\n\tmov.b32 \t%r5, 0;\n\tshfl.sync.idx.b32 %r6, %r5, %r5, 0x1f, -1;\n$L__BB0_2:\n\tret;\n}\n";

    #[test]
    fn a_broadcast_sunk_into_a_per_thread_branch_is_reported() {
        let sites = divergent_shuffles(SUNK);
        assert_eq!(sites.len(), 1);
        assert!(sites[0].starts_with("flash_k: shfl.sync.idx.b32 %r6"), "{sites:?}");
    }

    #[test]
    fn uniform_branches_and_rejoined_shuffles_pass() {
        // The same branch on a parameter: every lane takes the same side.
        let uniform = SUNK.replace("setp.ge.u32 \t%p1, %r2, %r4;", "setp.ge.u32 \t%p1, %r4, 7;");
        assert!(divergent_shuffles(&uniform).is_empty());
        // The skipped side ending at a label before the shuffle: the lanes may rejoin there.
        let rejoined = SUNK.replace("\tmov.b32 \t%r5, 0;\n\tshfl", "\tmov.b32 \t%r5, %r2;\n$L__BB0_1:\n\tshfl");
        assert!(divergent_shuffles(&rejoined).is_empty());
        // A shuffle predicated on a thread-dependent predicate is reported.
        let predicated = SUNK.replace("\tshfl.sync.idx", "\t@%p1 shfl.sync.idx");
        assert_eq!(divergent_shuffles(&predicated).len(), 2);
        // A butterfly's result is thread-dependent: a branch on it diverges.
        let bfly = SUNK.replace("and.b32 \t%r2, %r1, 15;", "shfl.sync.bfly.b32 %r2, %r4, 1, 0x1f, -1;");
        assert_eq!(divergent_shuffles(&bfly).len(), 1);
    }
}
