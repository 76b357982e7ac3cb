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
//! n/a ([`dtype_refusal`]). With `--verify` too, FA3 also runs once on each row's own inputs,
//! which the script reads from a file and answers with its output in another
//! ([`Session::run_fa3_on`], [`super::peer_check`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;

use crate::bench::TimingMode;
use serde::{Deserialize, Serialize};

use super::mods::ModSpec;
use super::peer_check::SharedInputs;
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
    shapes: Vec<RequestShape<'a>>,
}

/// A shape of a request: its fields, and for FlashAttention-3's check on our inputs
/// ([`Session::run_fa3_on`]) the files that replace timing.
#[derive(Serialize)]
struct RequestShape<'a> {
    /// The problem, its fields at the top level as the script reads them.
    #[serde(flatten)]
    shape: &'a Shape,
    /// Our E4M3 Q, K and V for FA3 to run on once instead of timing (the layout of
    /// [`SharedInputs`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    inputs: Option<String>,
    /// Where the script writes FA3's output on them (bf16).
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
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
            shapes: shapes.iter().map(|shape| RequestShape { shape, inputs: None, output: None }).collect(),
        }
    }

    /// The request that runs FA3 once on `shared`'s inputs and writes its output there (no
    /// timing; no modifications, which FP8 rows never have).
    fn fa3_on(shared: &'a SharedInputs) -> Self {
        let precision = Precision { out: flashrs::DType::Bf16, fp8_inputs: Some(shared.fp8()) };
        let fa3 = BACKENDS.iter().copied().filter(|b| b.1 == Implementation::Fa3).collect::<Vec<_>>();
        let mut request = Request::new(std::slice::from_ref(shared.shape()), precision, (0, 0, TimingMode::Call), false, &ModSpec::default(), &fa3);
        let path = |p: &std::path::Path| Some(p.to_string_lossy().into_owned());
        (request.shapes[0].inputs, request.shapes[0].output) = (path(shared.inputs()), path(shared.output()));
        request
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
    /// The file FA3's output on a shape's given inputs was written to ([`Session::run_fa3_on`]).
    output: Option<String>,
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
    match Session::start(peers) {
        Ok(session) => session.sweep(shapes, precision, timing, backward, mods, on_result),
        Err(why) => Outcome::Unavailable(why),
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
    pub fn run(&mut self, shapes: &[Shape], precision: Precision, timing: (usize, usize, TimingMode), backward: bool, mods: &ModSpec, on_result: impl FnMut()) -> Outcome {
        let request = Request::new(shapes, precision, timing, backward, mods, &backends(self.peers, backward, mods));
        let mut lines = vec![Line::Info(self.info.clone())];
        lines.extend(self.ask(&request, on_result));
        collect(lines, shapes, precision, (backward, mods, self.peers), self.stopped.clone())
    }

    /// [`Session::run`] as the last request: the script is then closed, and a failed exit
    /// becomes the outcome's `problem`.
    pub fn sweep(mut self, shapes: &[Shape], precision: Precision, timing: (usize, usize, TimingMode), backward: bool, mods: &ModSpec, on_result: impl FnMut()) -> Outcome {
        let outcome = self.run(shapes, precision, timing, backward, mods, on_result);
        match (outcome, self.finish()) {
            (Outcome::Ran { info, records, problem: None }, Some(p)) => Outcome::Ran { info, records, problem: Some(p) },
            (outcome, _) => outcome,
        }
    }

    /// Has the script run FlashAttention-3 once on `shared`'s inputs and write its output to
    /// `shared`'s output file (for [`SharedInputs::check`]); `Err` says why it did not.
    pub fn run_fa3_on(&mut self, shared: &SharedInputs) -> Result<(), String> {
        let reply = self.ask(&Request::fa3_on(shared), || {});
        let fa3 = reply.into_iter().find_map(|line| match line {
            Line::Result { index: 0, mut backends } => backends.remove("fa3"),
            _ => None,
        });
        match fa3 {
            Some(BackendResult { output: Some(_), .. }) => Ok(()),
            Some(BackendResult { error: Some(why), .. }) => Err(why),
            _ => Err(self.stopped.clone().unwrap_or_else(|| "the torch script wrote no output of FlashAttention-3's".into())),
        }
    }

    /// Sends `request` and reads the reply up to its end: its result lines, `on_result` called
    /// as each comes. A script that stops midway is recorded as stopped ([`Session::stop`]);
    /// one that has stopped is not asked.
    fn ask(&mut self, request: &Request, mut on_result: impl FnMut()) -> Vec<Line> {
        let mut lines = Vec::new();
        if self.exited {
            return lines;
        }
        let line = serde_json::to_string(request).expect("the request is plain data") + "\n";
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
        lines
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

    /// A tiny FP8 row shared for FA3's check: GQA, V narrower than K, causal; V all ones, so
    /// that every output element of the reference is 1.
    fn shared_row() -> SharedInputs {
        let shape = Shape { batch: 1, heads_q: 2, heads_kv: 1, seqlen_q: 3, seqlen_k: 4, head_dim: 16, head_dim_v: Some(8), causal: true };
        let problem = flashrs_reference::Problem { batch: 1, seqlen_q: 3, seqlen_k: 4, heads_q: 2, heads_kv: 1, head_dim: 16, head_dim_v: 8, causal: true, scale: 0.25 };
        let e4m3 = |x: f32| flashrs::element::fp8_from_f32(Fp8::E4m3, x);
        let (q, k): (Vec<u8>, Vec<u8>) = ((0..96).map(|i| e4m3((i % 7) as f32 / 4.0 - 0.75)).collect(), (0..64).map(|i| e4m3((i % 5) as f32 / 2.0 - 1.0)).collect());
        SharedInputs::write(shape, problem, Fp8::E4m3, [&q, &k, &[e4m3(1.0); 32]]).unwrap()
    }

    #[test]
    fn the_check_request_names_the_files_the_script_reads() {
        let shared = shared_row();
        let v = serde_json::to_value(Request::fa3_on(&shared)).unwrap();
        assert_eq!((&v["dtype"], &v["backends"]), (&serde_json::json!("e4m3"), &serde_json::json!(["fa3"])));
        let shape = &v["shapes"][0];
        assert_eq!((&shape["inputs"], &shape["output"]), (&shared.inputs().to_str().unwrap().into(), &shared.output().to_str().unwrap().into()));
        assert_eq!((&shape["heads_q"], &shape["head_dim_v"], &shape["causal"]), (&serde_json::json!(2), &serde_json::json!(8), &serde_json::json!(true)));
        assert_eq!((&v["window"], &v["softcap"]), (&serde_json::json!([-1, -1]), &serde_json::json!(0.0)));
        // Timing requests name no files.
        let timed = serde_json::to_value(Request::new(&shapes(), DType::Bf16.into(), (5, 20, TimingMode::Call), false, &ModSpec::default(), BACKENDS)).unwrap();
        assert!(timed["shapes"][0].get("inputs").is_none() && timed["shapes"][0].get("output").is_none());
        // The script reads them, loads the bytes as E4M3 in FlashAttention's layout, runs FA3
        // once without descale factors, and writes bf16 back, answering with the file.
        for needle in [
            "if shape.get(\"inputs\"):",
            "check_fa3(torch, shape, shape[\"inputs\"], shape[\"output\"], window, softcap)",
            "torch.frombuffer(data, dtype=torch.uint8)",
            "t.view(torch.float8_e4m3fn).reshape(x)",
            "(b, sq, shape[\"heads_q\"], d), (b, sk, shape[\"heads_kv\"], d), (b, sk, shape[\"heads_kv\"], dv)",
            "fa3.flash_attn_func(q, k, v, causal=bool(shape[\"causal\"]), window_size=window, softcap=softcap, num_splits=0)",
            "torch.frombuffer(raw, dtype=torch.bfloat16).copy_(host)",
            "\"output\": output}",
        ] {
            assert!(SCRIPT.contains(needle), "{needle}");
        }
    }

    /// A stand-in for the script's check of FA3 on given inputs: it checks the inputs file's
    /// size against the shape and writes an output of 1.5 (bf16 0x3fc0) everywhere; a request
    /// without files is timed as by [`FAKE`]; inputs named `fail` are refused.
    const FAKE_CHECK: &str = r#"
import json, os, sys
print(json.dumps({"kind": "info", "torch": "fake", "device": "none", "cudnn": None}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    for i, s in enumerate(request["shapes"]):
        dv = s.get("head_dim_v") or s["head_dim"]
        if "inputs" not in s:
            r = {"median_ms": 1.0, "min_ms": 1.0, "call": "fake"}
        elif os.path.getsize(s["inputs"]) != s["batch"] * (s["seqlen_q"] * s["heads_q"] * s["head_dim"] + s["seqlen_k"] * s["heads_kv"] * (s["head_dim"] + dv)):
            r = {"error": "wrong size"}
        else:
            with open(s["output"], "wb") as f:
                f.write(bytes([0xC0, 0x3F]) * (s["batch"] * s["seqlen_q"] * s["heads_q"] * dv))
            r = {"call": "fake", "output": s["output"]}
        print(json.dumps({"kind": "result", "index": i, "backends": {b: r for b in request["backends"]}}), flush=True)
    print(json.dumps({"kind": "done"}), flush=True)
"#;

    #[test]
    fn fa3s_error_is_that_of_the_output_the_script_wrote_on_our_inputs() {
        if !python() {
            eprintln!("skipped: no python3");
            return;
        }
        let mut session = Session::start_script(FAKE_CHECK, Peers::Fa3).unwrap();
        let shared = Ok(shared_row());
        // Every reference element is 1 (V is all ones), every output element 1.5.
        let check = crate::peer_check::check_fa3(&mut session, &shared).unwrap();
        assert!((check.max_abs_err - 0.5).abs() < 1e-12, "{check:?}");
        assert_eq!(check.rows, 2 * 3);
        // The session goes on to time, and the FA3 record of the row takes the check.
        let row = *shared.as_ref().unwrap().shape();
        let e4m3 = Precision { out: DType::Bf16, fp8_inputs: Some(Fp8::E4m3) };
        let Outcome::Ran { mut records, problem: None, .. } = session.run(&[row], e4m3, (1, 2, TimingMode::Call), false, &ModSpec::default(), || {}) else { panic!() };
        crate::peer_check::attach(&mut records, &[(row, Ok(check))]);
        assert_eq!((records[0].implementation, records[0].median_ms, records[0].max_abs_err, records[0].verified_rows), (Implementation::Fa3, Some(1.0), Some(0.5), Some(6)));
        // Files FA3 cannot run on, or the script's refusal: no check, and why.
        let output = shared.as_ref().unwrap().output().to_path_buf();
        std::fs::write(shared.as_ref().unwrap().inputs(), [0u8; 3]).unwrap();
        assert_eq!(crate::peer_check::check_fa3(&mut session, &shared).unwrap_err(), "wrong size");
        assert_eq!(crate::peer_check::check_fa3(&mut session, &Err("disk full".into())).unwrap_err(), "disk full");
        assert_eq!(session.finish(), None);
        drop(shared);
        assert!(!output.exists());
    }

    #[test]
    fn a_check_whose_script_stopped_says_why() {
        if !python() {
            eprintln!("skipped: no python3");
            return;
        }
        // FAKE writes no output file: its reply has times, not the file.
        let mut session = Session::start_script(FAKE, Peers::Fa3).unwrap();
        let shared = Ok(shared_row());
        assert_eq!(crate::peer_check::check_fa3(&mut session, &shared).unwrap_err(), "the torch script wrote no output of FlashAttention-3's");
        // A script that stops on the request.
        let mut session = Session::start_script(&FAKE.replace("n += 1", "sys.exit(0)"), Peers::Fa3).unwrap();
        assert!(crate::peer_check::check_fa3(&mut session, &shared).unwrap_err().starts_with("the torch script stopped early"));
    }

    #[test]
    fn the_script_compiles() {
        if !python() {
            eprintln!("skipped: no python3");
            return;
        }
        let path = std::env::temp_dir().join(format!("flashrs-torch-sdpa-compile-{}.py", std::process::id()));
        std::fs::write(&path, SCRIPT).unwrap();
        // compile() alone: py_compile would leave a __pycache__ behind.
        let status = Command::new("python3").arg("-c").arg("import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')").arg(&path).status();
        let _ = std::fs::remove_file(&path);
        assert!(status.unwrap().success());
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
