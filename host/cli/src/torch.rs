//! `--compare torch`: times PyTorch SDPA's backends and FlashAttention-3 (where its `fa3-fwd`
//! package is installed; `--compare fa3`: it alone, [`Peers`]) on the same shapes through an
//! embedded Python script
//! (`torch_sdpa.py`), which answers with one JSON object per line; with attention
//! modifications also FlexAttention. A backend that cannot take a row's modifications is n/a
//! ([`refusal`]) rather than timed on another problem: SDPA's backends take none,
//! FlashAttention-3 the window and softcap, FlexAttention all but sinks. Rows with a V head
//! dimension of their own (`--head-dim-v`) give every backend V that wide; the script reports
//! a backend that refuses it (SDPA's flash backend does) as n/a with its error. With FP8
//! inputs (`--dtype e4m3`) FlashAttention-3 alone runs, its own FP8 forward; the others are
//! n/a ([`dtype_refusal`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;

use crate::bench::TimingMode;
use serde::{Deserialize, Serialize};

use super::mods::ModSpec;
use super::record::{Implementation, Precision, Record};
use super::sweep::Shape;

/// The script, written to a temporary file for each run.
const SCRIPT: &str = include_str!("torch_sdpa.py");

/// The backends timed: the script's name for each, and the implementation it reports as (FA3
/// only forward: its package has no backward; FlexAttention only on modified rows, forward and
/// backward, see [`backends`]).
/// Adding a backend takes a line here, one in the script and an [`Implementation`].
const BACKENDS: &[(&str, Implementation)] =
    &[("flash", Implementation::TorchFa2), ("cudnn", Implementation::TorchCudnn), ("fa3", Implementation::Fa3), ("flex", Implementation::TorchFlex)];

/// Why `implementation` cannot run a problem with the modifications `mods`, if it cannot:
/// SDPA's flash and cuDNN backends take no window, softcap, ALiBi or sinks (an attention mask
/// could express a window, but not on those backends), FlashAttention-3's `flash_attn_func`
/// takes `window_size` and `softcap` but no ALiBi or sinks, and FlexAttention takes the
/// window (a block mask), softcap and ALiBi (a score modification) but no sinks (a logit
/// outside the keys).
pub fn refusal(implementation: Implementation, mods: &ModSpec) -> Option<String> {
    let (fa3, flex) = (implementation == Implementation::Fa3, implementation == Implementation::TorchFlex);
    let missing: Vec<&str> = [
        (mods.has_window() && !fa3 && !flex, "sliding window"),
        (mods.softcap.is_some() && !fa3 && !flex, "softcap"),
        (mods.alibi && !flex, "ALiBi"),
        (mods.sinks, "sinks"),
        (mods.block_sparsity.is_some() && !flex, "block sparsity"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    let (last, rest) = missing.split_last()?;
    let missing = if rest.is_empty() { last.to_string() } else { format!("{} or {last}", rest.join(", ")) };
    Some(format!("{} takes no {missing} (not timed on another problem)", who(implementation)))
}

/// Why `implementation` cannot run inputs of `precision`, if it cannot: FlashAttention-3 alone
/// has an FP8 forward (E4M3 Q, K and V, bf16 output); SDPA's backends and FlexAttention take
/// 16-bit inputs only.
pub fn dtype_refusal(implementation: Implementation, precision: Precision) -> Option<String> {
    let fp8 = precision.fp8_inputs?;
    (implementation != Implementation::Fa3).then(|| format!("{} takes no {} inputs (not timed on another problem)", who(implementation), fp8.name()))
}

/// `implementation` in messages.
fn who(implementation: Implementation) -> &'static str {
    match implementation {
        Implementation::TorchFa2 => "PyTorch SDPA's flash backend",
        Implementation::TorchCudnn => "PyTorch SDPA's cuDNN backend",
        Implementation::Fa3 => "FlashAttention-3's flash_attn_func",
        Implementation::TorchFlex => "PyTorch's FlexAttention",
        Implementation::Flashrs => "flashrs",
    }
}

/// Why `implementation` cannot run the problem, if it cannot ([`refusal`], [`dtype_refusal`]).
fn why_not(implementation: Implementation, precision: Precision, mods: &ModSpec) -> Option<String> {
    dtype_refusal(implementation, precision).or_else(|| refusal(implementation, mods))
}

/// What the script found about its torch (part of the JSON output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TorchInfo {
    /// `torch.__version__`.
    pub torch: String,
    /// The GPU torch used.
    pub device: String,
    /// `torch.backends.cudnn.version()`, if cuDNN is there.
    pub cudnn: Option<i64>,
}

/// The outcome of a comparison run.
#[derive(Debug)]
pub enum Outcome {
    /// Nothing was timed, for the reason given (no python3, no torch, no GPU, ...).
    Unavailable(String),
    /// Records for every shape and backend (refusals as records with a note).
    Ran {
        /// The torch that ran.
        info: TorchInfo,
        /// One record per shape and backend, in shape order.
        records: Vec<Record>,
        /// Set when the script stopped early; shapes it never reached have n/a records.
        problem: Option<String>,
    },
}

/// The script's input (see the protocol at the top of `torch_sdpa.py`).
#[derive(Serialize)]
struct Request<'a> {
    /// Element type name of Q, K and V ([`Precision::name`]: `e4m3` for FP8 inputs, whose
    /// output is bf16).
    dtype: &'a str,
    /// Untimed calls per backend and shape.
    warmup: usize,
    /// Timed calls.
    iters: usize,
    /// `call` or `queued` ([`TimingMode::name`]).
    timing: &'a str,
    /// Script names of the backends to time.
    backends: Vec<&'a str>,
    /// Time the backward pass (autograd) instead of the forward.
    backward: bool,
    /// Sliding window of every shape as FlashAttention's `window_size`, -1 for an unbounded
    /// side (`[-1, -1]`: none). Only backends that take it are asked for ([`refusal`]).
    window: [i64; 2],
    /// Softcap of every shape, FlashAttention's `softcap` (0: none).
    softcap: f32,
    /// ALiBi with BLOOM's slopes ([`super::mods::alibi_slopes`]) on every shape.
    alibi: bool,
    /// Block sparsity (0: none): FlexAttention draws its own random key blocks, as many per
    /// query block as flashrs visits ([`super::mods::ModSpec::visited_blocks`]).
    block_sparsity: f32,
    /// The shapes, answered by index (with `head_dim_v` where a shape has its own).
    shapes: &'a [Shape],
}

impl<'a> Request<'a> {
    /// The request for `shapes` under `mods` in `precision`, asking only for the backends of
    /// `backends` that can run them.
    fn new(shapes: &'a [Shape], precision: Precision, (warmup, iters, timing): (usize, usize, TimingMode), backward: bool, mods: &ModSpec, backends: &[(&'a str, Implementation)]) -> Self {
        let side = |s: Option<usize>| s.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        Request {
            dtype: precision.name(),
            warmup,
            iters,
            timing: timing.name(),
            backends: backends.iter().filter(|b| why_not(b.1, precision, mods).is_none()).map(|b| b.0).collect(),
            backward,
            window: [side(mods.window.0), side(mods.window.1)],
            softcap: mods.softcap.unwrap_or(0.0),
            alibi: mods.alibi,
            block_sparsity: mods.block_sparsity.unwrap_or(0.0),
            shapes,
        }
    }
}

/// The backends a run times: FA3 only forward (its package has no backward); FlexAttention
/// only on rows with modifications (plain rows have SDPA's and FlashAttention's own kernels,
/// and each compiled shape costs seconds), backward rows through its compiled backward.
fn backends(peers: Peers, backward: bool, mods: &ModSpec) -> Vec<(&'static str, Implementation)> {
    let takes = |i: Implementation| match i {
        Implementation::Fa3 => !backward,
        _ if peers == Peers::Fa3 => false,
        Implementation::TorchFlex => !mods.is_plain(),
        _ => true,
    };
    BACKENDS.iter().copied().filter(|b| takes(b.1)).collect()
}

/// Which of the script's backends a run times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peers {
    /// SDPA's flash and cuDNN backends, FlashAttention-3 and, on modified rows,
    /// FlexAttention (`--compare torch`).
    All,
    /// FlashAttention-3 alone (`--compare fa3`).
    Fa3,
}

/// One line of the script's reply.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    /// Nothing will be timed, for this reason.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The torch that runs.
    Info(TorchInfo),
    /// The backends' results for shape `index`.
    Result {
        /// Index into the request's shapes.
        index: usize,
        /// By script backend name.
        backends: BTreeMap<String, BackendResult>,
    },
    /// The request has been answered.
    Done,
}

/// One backend on one shape: times and how it was called, or why it refused.
#[derive(Clone, Debug, PartialEq, Deserialize)]
struct BackendResult {
    /// Median time, ms.
    median_ms: Option<f64>,
    /// Fastest time, ms.
    min_ms: Option<f64>,
    /// The call that ran (e.g. `sdpa+enable_gqa`).
    call: Option<String>,
    /// Every call's refusal, when none ran.
    error: Option<String>,
}

/// Parses one line of the reply; anything that is not a protocol object (a stray print from
/// a library) is skipped.
fn parse_line(line: &str) -> Option<Line> {
    serde_json::from_str(line.trim()).ok()
}

/// Gathers a reply into an outcome: a record per shape and backend, those that cannot run
/// `mods` or `precision` n/a with the reason. `problem` describes an early stop of the script,
/// if any.
fn collect(lines: impl IntoIterator<Item = Line>, shapes: &[Shape], precision: Precision, (backward, mods, peers): (bool, &ModSpec, Peers), problem: Option<String>) -> Outcome {
    let mut info = None;
    let mut results: Vec<Option<BTreeMap<String, BackendResult>>> = vec![None; shapes.len()];
    for line in lines {
        match line {
            Line::Unavailable { reason } => return Outcome::Unavailable(reason),
            Line::Info(i) => info = Some(i),
            Line::Done => {}
            Line::Result { index, backends } => {
                if let Some(slot) = results.get_mut(index) {
                    *slot = Some(backends);
                }
            }
        }
    }
    let Some(info) = info else {
        return Outcome::Unavailable(problem.unwrap_or_else(|| "the torch script reported nothing".into()));
    };
    let mut records = Vec::new();
    for (shape, result) in shapes.iter().zip(&results) {
        for (key, implementation) in backends(peers, backward, mods) {
            let r = result.as_ref().and_then(|b| b.get(key));
            let kernel = r.and_then(|r| r.call.as_deref()).unwrap_or("");
            let mut record = Record::new(implementation, *shape, precision.name(), "torch", kernel).with_mods(*mods).with_kv(precision.fp8_inputs);
            record.backward = backward;
            if let Some(why) = why_not(implementation, precision, mods) {
                records.push(record.unavailable(why));
                continue;
            }
            records.push(match r {
                Some(BackendResult { median_ms: Some(median), min_ms: Some(min), .. }) => record.timed(*median, *min),
                Some(BackendResult { error: Some(e), .. }) => record.unavailable(e.clone()),
                _ => record.unavailable("not reported by the torch script"),
            });
        }
    }
    Outcome::Ran { info, records, problem }
}

/// Runs the script with `python3` on `shapes` under `mods`; `on_result` is called as each
/// shape finishes (for a progress bar). Never fails: whatever goes wrong becomes
/// [`Outcome::Unavailable`] or the `problem` of a partial run.
pub fn run(shapes: &[Shape], precision: Precision, timing: (usize, usize, TimingMode), backward: bool, mods: &ModSpec, peers: Peers, on_result: impl FnMut()) -> Outcome {
    let mut session = match Session::start(peers) {
        Ok(s) => s,
        Err(why) => return Outcome::Unavailable(why),
    };
    let outcome = session.run(shapes, precision, timing, backward, mods, on_result);
    match (outcome, session.finish()) {
        (Outcome::Ran { info, records, problem: None }, Some(p)) => Outcome::Ran { info, records, problem: Some(p) },
        (outcome, _) => outcome,
    }
}

/// The script running under `python3`, asked one request at a time: interleaved rounds
/// (`--rounds`) alternate its rows with ours and pay for torch's start-up once.
pub struct Session {
    /// The `python3` process.
    child: Child,
    /// Its standard input, one request per line; dropped to let it exit.
    stdin: Option<ChildStdin>,
    /// Its standard output, one protocol object per line.
    stdout: Lines<BufReader<ChildStdout>>,
    /// Collects its standard error on the side, so that a chatty script cannot block on a
    /// full pipe; joined once it has stopped.
    stderr: Option<JoinHandle<String>>,
    /// The torch that runs.
    info: TorchInfo,
    /// The backends each request asks for.
    peers: Peers,
    /// Whether it has been waited for.
    exited: bool,
    /// Why it stopped, if it failed: every later request answers with this.
    stopped: Option<String>,
}

impl Session {
    /// Starts the script and reads its first answer: the torch that runs, or why nothing
    /// can be timed (no python3, no torch, no GPU, ...).
    pub fn start(peers: Peers) -> Result<Session, String> {
        Self::start_script(SCRIPT, peers)
    }

    /// [`Session::start`] with the script `text` (tests give a stand-in for torch).
    fn start_script(text: &str, peers: Peers) -> Result<Session, String> {
        // Unique per session: tests start several at once.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let script = std::env::temp_dir().join(format!("flashrs-torch-sdpa-{}-{n}.py", std::process::id()));
        std::fs::write(&script, text).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        let child = Command::new("python3").arg(&script).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        let mut session = match child {
            Ok(mut child) => {
                let mut stderr = child.stderr.take().expect("stderr is piped");
                Session {
                    stdin: child.stdin.take(),
                    stdout: BufReader::new(child.stdout.take().expect("stdout is piped")).lines(),
                    stderr: Some(std::thread::spawn(move || {
                        let mut text = String::new();
                        let _ = stderr.read_to_string(&mut text);
                        text
                    })),
                    child,
                    info: TorchInfo { torch: String::new(), device: String::new(), cudnn: None },
                    peers,
                    exited: false,
                    stopped: None,
                }
            }
            Err(e) => {
                let _ = std::fs::remove_file(&script);
                return Err(format!("cannot run python3: {e}"));
            }
        };
        let first = session.next_line();
        // Python has read the script by the time it answers (or has stopped); a leftover
        // temporary file changes no result.
        let _ = std::fs::remove_file(&script);
        match first {
            Some(Line::Info(info)) => {
                session.info = info;
                Ok(session)
            }
            Some(Line::Unavailable { reason }) => Err(reason),
            _ => Err(session.stop(false).unwrap_or_else(|| "the torch script reported nothing".into())),
        }
    }

    /// The torch that runs.
    pub fn info(&self) -> &TorchInfo {
        &self.info
    }

    /// Times `shapes` under `mods` in `precision` (one request); `on_result` is called as
    /// each shape finishes. A script that stops midway leaves the shapes it did not reach n/a and says
    /// why in the outcome's `problem`, as every later call does.
    pub fn run(&mut self, shapes: &[Shape], precision: Precision, timing: (usize, usize, TimingMode), backward: bool, mods: &ModSpec, mut on_result: impl FnMut()) -> Outcome {
        let request = Request::new(shapes, precision, timing, backward, mods, &backends(self.peers, backward, mods));
        let mut lines = vec![Line::Info(self.info.clone())];
        if !self.exited {
            let line = serde_json::to_string(&request).expect("the request is plain data") + "\n";
            // A failed write shows up as the script having stopped.
            let _ = self.stdin.as_mut().map(|stdin| stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()));
            loop {
                match self.next_line() {
                    Some(Line::Done) => break,
                    Some(result @ Line::Result { .. }) => {
                        on_result();
                        lines.push(result);
                    }
                    Some(_) => {}
                    None => {
                        self.stop(false);
                        break;
                    }
                }
            }
        }
        collect(lines, shapes, precision, (backward, mods, self.peers), self.stopped.clone())
    }

    /// Closes the script's input and waits for it: why it failed, if it did.
    pub fn finish(mut self) -> Option<String> {
        self.stop(true)
    }

    /// The next protocol line of the reply (skipping anything else), or `None` once the
    /// script's output has ended.
    fn next_line(&mut self) -> Option<Line> {
        self.stdout.by_ref().map_while(Result::ok).find_map(|line| parse_line(&line))
    }

    /// Closes the script's input, waits for it to exit and records why it failed, if it
    /// did: a failed exit status, or any exit before `closing` (in the middle of a request).
    fn stop(&mut self, closing: bool) -> Option<String> {
        if self.exited {
            return self.stopped.clone();
        }
        self.exited = true;
        drop(self.stdin.take());
        let status = self.child.wait();
        let stderr = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        self.stopped = match status {
            Ok(s) if s.success() && closing => None,
            Ok(s) if s.success() => Some(format!("the torch script stopped early: {}", tail(&stderr, 800))),
            Ok(s) => Some(format!("the torch script exited with {s}: {}", tail(&stderr, 800))),
            Err(e) => Some(format!("waiting for python3 failed: {e}")),
        };
        self.stopped.clone()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop(true);
    }
}

/// The last `max` bytes of `text`, at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let text = text.trim_end();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::{DType, Fp8};

    fn shapes() -> Vec<Shape> {
        let s = Shape { batch: 2, heads_q: 8, heads_kv: 2, seqlen_q: 512, seqlen_k: 512, head_dim: 64, head_dim_v: None, causal: true };
        vec![s, Shape { causal: false, ..s }]
    }

    fn lines(text: &str) -> Vec<Line> {
        text.lines().filter_map(parse_line).collect()
    }

    const INFO: &str = r#"{"kind": "info", "torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3", "cudnn": 91900}"#;

    #[test]
    fn parses_results_refusals_and_ignores_noise() {
        let reply = format!(
            "{INFO}\nsome library printed this\n\
             {{\"kind\": \"result\", \"index\": 0, \"backends\": {{\
               \"flash\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"sdpa+enable_gqa\"}},\
               \"cudnn\": {{\"error\": \"sdpa+enable_gqa: No available kernel.\"}}}}}}\n"
        );
        let Outcome::Ran { info, records, problem } = collect(lines(&reply), &shapes(), DType::F16.into(), (false, &ModSpec::default(), Peers::All), None) else { panic!() };
        assert_eq!(info.cudnn, Some(91900));
        assert_eq!(problem, None);
        // A plain row: every backend but FlexAttention.
        assert_eq!(records.len(), 2 * (BACKENDS.len() - 1));
        let fa2 = &records[0];
        assert_eq!((fa2.implementation, fa2.median_ms, fa2.kernel.as_str()), (Implementation::TorchFa2, Some(0.5), "sdpa+enable_gqa"));
        assert!(fa2.tflops.is_some());
        let cudnn = &records[1];
        assert_eq!(cudnn.median_ms, None);
        assert_eq!(cudnn.note.as_deref(), Some("sdpa+enable_gqa: No available kernel."));
        // FA3 was not in the reply; the second shape never got a result line.
        assert_eq!((records[2].implementation, records[2].median_ms), (Implementation::Fa3, None));
        assert_eq!(records[3].note.as_deref(), Some("not reported by the torch script"));
        assert_eq!(records[5].shape, shapes()[1]);
        assert!(records.iter().all(|r| r.implementation != Implementation::TorchFlex));
    }

    #[test]
    fn unavailable_and_silent_scripts() {
        let reply = r#"{"kind": "unavailable", "reason": "torch 2.11.0 sees no CUDA GPU"}"#;
        match collect(lines(reply), &shapes(), DType::F16.into(), (false, &ModSpec::default(), Peers::All), None) {
            Outcome::Unavailable(r) => assert_eq!(r, "torch 2.11.0 sees no CUDA GPU"),
            o => panic!("{o:?}"),
        }
        match collect(lines(""), &shapes(), DType::F16.into(), (false, &ModSpec::default(), Peers::All), Some("exited with 1: Traceback".into())) {
            Outcome::Unavailable(r) => assert!(r.contains("Traceback")),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn request_uses_the_shape_field_names_the_script_reads() {
        let s = shapes();
        let req = Request::new(&s, DType::Bf16.into(), (5, 20, TimingMode::Queued), true, &ModSpec::default(), &backends(Peers::All, true, &ModSpec::default()));
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["backends"], serde_json::json!(["flash", "cudnn"]));
        assert_eq!((&v["window"], &v["softcap"]), (&serde_json::json!([-1, -1]), &serde_json::json!(0.0)));
        for key in ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal"] {
            assert!(v["shapes"][0].get(key).is_some(), "{key}");
            assert!(SCRIPT.contains(&format!("\"{key}\"")), "{key}");
        }
        assert_eq!(v["timing"], "queued");
        assert_eq!(v["backward"], true);
        assert!(SCRIPT.contains("request.get(\"backward\", False)"));
        assert!(SCRIPT.contains("request.get(\"timing\", \"call\") == \"queued\""));
        for (key, _) in BACKENDS {
            assert!(SCRIPT.contains(&format!("\"{key}\":")), "{key}");
        }
        assert!(SCRIPT.contains("request.get(\"window\", [-1, -1])") && SCRIPT.contains("request.get(\"softcap\", 0.0)"));
        assert!(SCRIPT.contains("request.get(\"alibi\", False)"));
        // Plain rows: no FlexAttention; backward rows: no FA3.
        let forward = |m: &ModSpec| backends(Peers::All, false, m).into_iter().map(|b| b.1).collect::<Vec<_>>();
        assert!(!forward(&ModSpec::default()).contains(&Implementation::TorchFlex));
        assert!(forward(&ModSpec { alibi: true, ..ModSpec::default() }).contains(&Implementation::TorchFlex));
        let backward = backends(Peers::All, true, &ModSpec { alibi: true, ..ModSpec::default() });
        assert!(backward.iter().any(|b| b.1 == Implementation::TorchFlex) && backward.iter().all(|b| b.1 != Implementation::Fa3));
        assert!(backends(Peers::All, true, &ModSpec::default()).iter().all(|b| b.1 != Implementation::TorchFlex));
    }

    #[test]
    fn the_request_gives_the_script_v_of_its_own_width_and_the_reply_counts_it() {
        let plain = shapes();
        let v = serde_json::to_value(Request::new(&plain, DType::Bf16.into(), (5, 20, TimingMode::Call), false, &ModSpec::default(), &backends(Peers::All, false, &ModSpec::default()))).unwrap();
        assert!(v["shapes"][0].get("head_dim_v").is_none(), "plain requests are as they were");
        let dv: Vec<Shape> = plain.iter().map(|s| Shape { head_dim: 192, head_dim_v: Some(128), ..*s }).collect();
        let v = serde_json::to_value(Request::new(&dv, DType::Bf16.into(), (5, 20, TimingMode::Call), false, &ModSpec::default(), &backends(Peers::All, false, &ModSpec::default()))).unwrap();
        assert_eq!((&v["shapes"][0]["head_dim"], &v["shapes"][0]["head_dim_v"]), (&serde_json::json!(192), &serde_json::json!(128)));
        assert!(SCRIPT.contains("shape.get(\"head_dim_v\") or d"));
        // A backend that refuses the width is n/a with its reason; one that runs counts the
        // problem's own FLOPs.
        let reply = format!(
            "{INFO}\n{{\"kind\": \"result\", \"index\": 0, \"backends\": {{\
               \"flash\": {{\"error\": \"sdpa: RuntimeError: No available kernel.\"}},\
               \"fa3\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"fa3_fwd_interface.flash_attn_func\"}}}}}}\n"
        );
        let Outcome::Ran { records, .. } = collect(lines(&reply), &dv, DType::Bf16.into(), (false, &ModSpec::default(), Peers::All), None) else { panic!() };
        let (fa2, fa3) = (&records[0], &records[2]);
        assert_eq!((fa2.median_ms, fa2.note.as_deref()), (None, Some("sdpa: RuntimeError: No available kernel.")));
        assert_eq!(fa3.shape, dv[0]);
        assert_eq!(fa3.tflops, Some(dv[0].flops() / 0.5e-3 / 1e12));
        assert_eq!(dv[0].flops(), 2.0 * 2.0 * 8.0 * 512.0 * 512.0 * (192.0 + 128.0) / 2.0);
    }

    #[test]
    fn the_request_carries_the_modifications_to_the_backends_that_take_them() {
        let s = shapes();
        let local = ModSpec { window: (Some(4096), None), softcap: Some(30.0), ..ModSpec::default() };
        let v = serde_json::to_value(Request::new(&s, DType::Bf16.into(), (5, 20, TimingMode::Call), false, &local, &backends(Peers::All, false, &local))).unwrap();
        assert_eq!(v["backends"], serde_json::json!(["fa3", "flex"]));
        assert_eq!((&v["window"], &v["softcap"], &v["alibi"]), (&serde_json::json!([4096, -1]), &serde_json::json!(30.0), &serde_json::json!(false)));
        // The script's documented protocol names the fields.
        assert!(SCRIPT.contains("\"window\": [left, right]") && SCRIPT.contains("\"softcap\": float") && SCRIPT.contains("\"alibi\": bool"));
        // ALiBi: FlexAttention alone; sinks: nothing can run them.
        let alibi = ModSpec { alibi: true, ..local };
        let v = serde_json::to_value(Request::new(&s, DType::Bf16.into(), (5, 20, TimingMode::Call), false, &alibi, &backends(Peers::All, false, &alibi))).unwrap();
        assert_eq!((&v["backends"], &v["alibi"]), (&serde_json::json!(["flex"]), &serde_json::json!(true)));
        let sinks = ModSpec { sinks: true, ..alibi };
        let v = serde_json::to_value(Request::new(&s, DType::Bf16.into(), (5, 20, TimingMode::Call), false, &sinks, &backends(Peers::All, false, &sinks))).unwrap();
        assert_eq!(v["backends"], serde_json::json!([]));
    }

    #[test]
    fn backends_that_cannot_take_the_modifications_are_na_with_the_reason() {
        let local = ModSpec { window: (Some(128), Some(0)), ..ModSpec::default() };
        // The script timed FA3 (the only backend asked for) on the windowed problem.
        let reply = format!("{INFO}\n{{\"kind\": \"result\", \"index\": 0, \"backends\": {{\"fa3\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"fa3_fwd_interface.flash_attn_func+window_size\"}}}}}}\n");
        let Outcome::Ran { records, .. } = collect(lines(&reply), &shapes(), DType::Bf16.into(), (false, &local, Peers::All), None) else { panic!() };
        assert!(records.iter().all(|r| r.mods == local));
        let (fa2, cudnn, fa3, flex) = (&records[0], &records[1], &records[2], &records[3]);
        // Asked for but not reported: n/a, not a time.
        assert_eq!((flex.implementation, flex.median_ms), (Implementation::TorchFlex, None));
        assert_eq!(fa2.median_ms, None);
        assert_eq!(fa2.note.as_deref(), Some("PyTorch SDPA's flash backend takes no sliding window (not timed on another problem)"));
        assert!(cudnn.note.as_deref().unwrap().starts_with("PyTorch SDPA's cuDNN backend takes no sliding window"));
        // FA3's rate counts the window's pairs, as ours does.
        assert_eq!(fa3.median_ms, Some(0.5));
        assert_eq!(fa3.tflops, Some(local.flops(&fa3.shape) / 0.5e-3 / 1e12));
        let all = ModSpec { softcap: Some(5.0), alibi: true, sinks: true, ..local };
        assert_eq!(refusal(Implementation::Fa3, &all).unwrap(), "FlashAttention-3's flash_attn_func takes no ALiBi or sinks (not timed on another problem)");
        assert_eq!(refusal(Implementation::TorchFa2, &all).unwrap(), "PyTorch SDPA's flash backend takes no sliding window, softcap, ALiBi or sinks (not timed on another problem)");
        assert_eq!(refusal(Implementation::Fa3, &ModSpec { softcap: Some(5.0), ..local }), None);
        assert_eq!(refusal(Implementation::TorchFlex, &all).unwrap(), "PyTorch's FlexAttention takes no sinks (not timed on another problem)");
        assert_eq!(refusal(Implementation::TorchFlex, &ModSpec { sinks: false, ..all }), None);
        assert!(BACKENDS.iter().all(|b| refusal(b.1, &ModSpec::default()).is_none()));
        // Even a script that reports a time for a refused backend does not make it count.
        let reply = format!("{INFO}\n{{\"kind\": \"result\", \"index\": 0, \"backends\": {{\"flash\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"sdpa\"}}}}}}\n");
        let Outcome::Ran { records, .. } = collect(lines(&reply), &shapes(), DType::Bf16.into(), (false, &local, Peers::All), None) else { panic!() };
        assert_eq!(records[0].median_ms, None);
    }

    #[test]
    fn runs_the_script_and_never_fails() {
        // Here: no torch (or no python3, or no GPU) gives a reason; with torch and a GPU, times.
        let tiny = [Shape { batch: 1, heads_q: 2, heads_kv: 1, seqlen_q: 128, seqlen_k: 128, head_dim: 64, head_dim_v: None, causal: true }];
        let mut reported = 0;
        match run(&tiny, DType::F16.into(), (1, 2, TimingMode::Queued), false, &ModSpec::default(), Peers::All, || reported += 1) {
            Outcome::Unavailable(why) => assert!(!why.is_empty() && reported == 0),
            Outcome::Ran { records, .. } => assert!(records.len() == BACKENDS.len() - 1 && reported == 1),
        }
    }

    /// A stand-in for the script: the protocol without torch, each shape's time its index
    /// plus the request's number; a request with 99 warm-ups makes it exit after one shape.
    const FAKE: &str = r#"
import json, sys
print(json.dumps({"kind": "info", "torch": "fake", "device": "none", "cudnn": None}), flush=True)
n = 0
for line in sys.stdin:
    request = json.loads(line)
    n += 1
    for i, _ in enumerate(request["shapes"]):
        if request["warmup"] == 99 and i == 1:
            sys.exit(0)
        print("noise", flush=True)
        t = {"median_ms": float(i + n), "min_ms": float(i + n), "call": "fake"}
        print(json.dumps({"kind": "result", "index": i, "backends": {b: t for b in request["backends"]}}), flush=True)
    print(json.dumps({"kind": "done"}), flush=True)
"#;

    fn python() -> bool {
        Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success())
    }

    #[test]
    fn a_session_answers_request_after_request_then_exits_cleanly() {
        if !python() {
            eprintln!("skipped: no python3");
            return;
        }
        let mut session = Session::start_script(FAKE, Peers::All).unwrap();
        assert_eq!(session.info().torch, "fake");
        let timing = (1, 2, TimingMode::Call);
        let mut reported = 0;
        for round in 1..=3 {
            let Outcome::Ran { records, problem, .. } = session.run(&shapes(), DType::F16.into(), timing, false, &ModSpec::default(), || reported += 1) else { panic!() };
            assert_eq!(problem, None);
            // Shape i of request n took i + n ms: each request was answered in turn.
            let fa2: Vec<Option<f64>> = records.iter().filter(|r| r.implementation == Implementation::TorchFa2).map(|r| r.median_ms).collect();
            assert_eq!(fa2, [Some(round as f64), Some(round as f64 + 1.0)]);
        }
        assert_eq!(reported, 6);
        assert_eq!(session.finish(), None);
    }

    #[test]
    fn a_session_whose_script_stops_midway_says_so_every_time_after() {
        if !python() {
            eprintln!("skipped: no python3");
            return;
        }
        let mut session = Session::start_script(FAKE, Peers::All).unwrap();
        let Outcome::Ran { records, problem, .. } = session.run(&shapes(), DType::F16.into(), (99, 2, TimingMode::Call), false, &ModSpec::default(), || {}) else { panic!() };
        assert!(problem.as_deref().unwrap().starts_with("the torch script stopped early"), "{problem:?}");
        assert_eq!(records[0].median_ms, Some(1.0));
        assert_eq!((records[3].shape, records[3].median_ms), (shapes()[1], None));
        let Outcome::Ran { records, problem: again, .. } = session.run(&shapes(), DType::F16.into(), (1, 2, TimingMode::Call), false, &ModSpec::default(), || {}) else { panic!() };
        assert_eq!(again, problem);
        assert!(records.iter().all(|r| r.median_ms.is_none()));
        assert_eq!(session.finish(), problem);
        // A script that says nothing is no session.
        assert!(Session::start_script("import sys; sys.exit(3)", Peers::All).err().unwrap().contains("exited with"));
    }

    #[test]
    fn fa3_alone_asks_for_fa3_and_reports_nothing_else() {
        let plain = ModSpec::default();
        assert_eq!(backends(Peers::Fa3, false, &plain), [("fa3", Implementation::Fa3)]);
        let window = ModSpec { window: (Some(64), Some(0)), ..plain };
        assert_eq!(backends(Peers::Fa3, false, &window), [("fa3", Implementation::Fa3)]);
        assert!(backends(Peers::Fa3, true, &plain).is_empty());
        let v = serde_json::to_value(Request::new(&shapes(), DType::Bf16.into(), (5, 20, TimingMode::Call), false, &plain, &backends(Peers::Fa3, false, &plain))).unwrap();
        assert_eq!(v["backends"], serde_json::json!(["fa3"]));
        let reply = format!("{INFO}\n{{\"kind\": \"result\", \"index\": 0, \"backends\": {{\"fa3\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"fa3\"}}}}}}\n");
        let Outcome::Ran { records, .. } = collect(lines(&reply), &shapes(), DType::Bf16.into(), (false, &plain, Peers::Fa3), None) else { panic!() };
        assert!(records.iter().all(|r| r.implementation == Implementation::Fa3));
        assert_eq!(records.iter().map(|r| r.median_ms).collect::<Vec<_>>(), [Some(0.5), None]);
    }

    #[test]
    fn fp8_inputs_ask_fa3_alone_and_the_rest_are_na_with_the_reason() {
        let e4m3 = Precision { out: DType::Bf16, fp8_inputs: Some(Fp8::E4m3) };
        let plain = ModSpec::default();
        let v = serde_json::to_value(Request::new(&shapes(), e4m3, (5, 20, TimingMode::Call), false, &plain, &backends(Peers::All, false, &plain))).unwrap();
        assert_eq!((&v["dtype"], &v["backends"]), (&serde_json::json!("e4m3"), &serde_json::json!(["fa3"])));
        let v = serde_json::to_value(Request::new(&shapes(), e4m3, (5, 20, TimingMode::Call), false, &plain, &backends(Peers::Fa3, false, &plain))).unwrap();
        assert_eq!(v["backends"], serde_json::json!(["fa3"]));
        // The script converts FA3's inputs to E4M3 and refuses FP8 on every other backend.
        assert!(SCRIPT.contains("\"e4m3\": torch.bfloat16") && SCRIPT.contains("torch.float8_e4m3fn") && SCRIPT.contains("\"(e4m3)\" if fp8"));
        let reply = format!("{INFO}\n{{\"kind\": \"result\", \"index\": 0, \"backends\": {{\"fa3\": {{\"median_ms\": 0.5, \"min_ms\": 0.4, \"call\": \"fa3_fwd_interface.flash_attn_func(e4m3)\"}}}}}}\n");
        let Outcome::Ran { records, .. } = collect(lines(&reply), &shapes(), e4m3, (false, &plain, Peers::All), None) else { panic!() };
        assert_eq!(records.len(), 2 * (BACKENDS.len() - 1));
        let (fa2, cudnn, fa3) = (&records[0], &records[1], &records[2]);
        assert_eq!(fa2.note.as_deref(), Some("PyTorch SDPA's flash backend takes no e4m3 inputs (not timed on another problem)"));
        assert!(cudnn.median_ms.is_none() && cudnn.note.as_deref().unwrap().starts_with("PyTorch SDPA's cuDNN backend takes no e4m3"));
        assert_eq!((fa3.median_ms, fa3.kernel.as_str()), (Some(0.5), "fa3_fwd_interface.flash_attn_func(e4m3)"));
        assert_eq!((fa3.dtype.as_str(), fa3.kv_dtype.as_deref()), ("e4m3", Some("e4m3")));
        assert_eq!(dtype_refusal(Implementation::TorchFlex, e4m3).unwrap(), "PyTorch's FlexAttention takes no e4m3 inputs (not timed on another problem)");
        assert!(BACKENDS.iter().all(|b| dtype_refusal(b.1, DType::Bf16.into()).is_none()));
        // 16-bit requests are as they were.
        let v = serde_json::to_value(Request::new(&shapes(), DType::Bf16.into(), (5, 20, TimingMode::Call), false, &plain, &backends(Peers::All, false, &plain))).unwrap();
        assert_eq!((&v["dtype"], &v["backends"]), (&serde_json::json!("bf16"), &serde_json::json!(["flash", "cudnn", "fa3"])));
    }

    #[test]
    fn tail_keeps_the_end_at_a_char_boundary() {
        assert_eq!(tail("abc\n", 2), "bc");
        assert_eq!(tail("é", 1), "");
    }
}
