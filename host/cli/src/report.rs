//! The results of a run for people (a table with geometric means) and for programs (JSON, CSV).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compare::{self, Comparison, Interleaved, LONG_SEQLEN};
use super::record::{Implementation, Record};
use super::torch::TorchInfo;

/// Version of the JSON layout; raised when a field changes meaning or disappears.
pub const SCHEMA: u32 = 1;

/// CSV columns: the fields of [`Record`], flattened, in this order (`mods` last, so that the
/// columns of files written before it keep their positions), less [`CSV_HEAD_DIM_V`].
pub const CSV_COLUMNS: [&str; 21] = [
    "implementation",
    "batch",
    "heads_q",
    "heads_kv",
    "seqlen_q",
    "seqlen_k",
    "head_dim",
    "causal",
    "dtype",
    "path",
    "kernel",
    "config",
    "median_ms",
    "min_ms",
    "tflops",
    "gbps",
    "kv_gbps",
    "max_abs_err",
    "verified_rows",
    "note",
    "mods",
];

/// The CSV column of V's head dimension, after [`CSV_COLUMNS`] and only in files of runs with
/// `--head-dim-v`, so that the files of other runs keep their form.
pub const CSV_HEAD_DIM_V: &str = "head_dim_v";

/// Everything a run produced. Serializes to the `--json` document (and reads back from it, for
/// `flashrs report`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The day the run was made (UTC, `YYYY-MM-DD`).
    #[serde(default)]
    pub date: Option<String>,
    /// The command line that made it.
    #[serde(default)]
    pub command: Option<String>,
    /// GPU name and kernel module architecture.
    pub device: String,
    /// Element type name.
    pub dtype: String,
    /// Untimed launches before timing.
    pub warmup: usize,
    /// Timed launches per row.
    pub iters: usize,
    /// What the events around a timed launch saw (`call` or `queued`, see `--timing`).
    pub timing: String,
    /// How long opening the GPU took, if it was opened.
    #[serde(default)]
    pub startup: Option<Startup>,
    /// The torch that was compared with, if any.
    pub torch: Option<TorchInfo>,
    /// Why torch was asked for but not compared, if so.
    pub torch_unavailable: Option<String>,
    /// Every result, ours first in run order, then torch's.
    pub records: Vec<Record>,
    /// Geometric means of ours/theirs per other implementation (with [`Report::rounds`]: of
    /// each problem's median per-round ratio).
    pub summary: Vec<Comparison>,
    /// Interleaved rounds per row (`--rounds`), if the run had them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    /// With [`Report::rounds`]: each problem's per-round ratios against each other
    /// implementation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interleaved: Vec<Interleaved>,
}

/// Opening the GPU: driver, primary context and kernels, the start-up a serving process pays.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Startup {
    /// Milliseconds from loading the driver to the kernels being ready.
    pub ms: f64,
    /// The kernel image the GPU loaded (`sm_90a.cubin`; a `.ptx` one is compiled by the driver).
    pub kernel_image: String,
}

impl Report {
    /// Assembles a report; the summary is computed from `records`.
    pub fn new(device: String, dtype: &str, warmup: usize, iters: usize, records: Vec<Record>) -> Self {
        let summary = compare::summarize(&records);
        Report { schema: SCHEMA, date: None, command: None, device, dtype: dtype.into(), warmup, iters, timing: "call".into(), startup: None, torch: None, torch_unavailable: None, records, summary, rounds: None, interleaved: Vec::new() }
    }

    /// The `--json` document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports are plain data") + "\n"
    }

    /// The `--csv` file: a header of [`CSV_COLUMNS`] (and [`CSV_HEAD_DIM_V`] when a record
    /// has it), then one line per record.
    pub fn to_csv(&self) -> String {
        let mut columns = CSV_COLUMNS.to_vec();
        if self.records.iter().any(|r| r.shape.head_dim_v.is_some()) {
            columns.push(CSV_HEAD_DIM_V);
        }
        let mut out = columns.join(",") + "\n";
        for r in &self.records {
            let fields = serde_json::to_value(r).expect("records are plain data");
            let cells: Vec<String> = columns.iter().map(|c| csv_cell(&fields[*c])).collect();
            out += &(cells.join(",") + "\n");
        }
        out
    }

    /// The human-readable table of our rows, with the other implementations side by side,
    /// followed by the geometric means and the reasons for any n/a.
    pub fn table(&self) -> String {
        let others: Vec<Implementation> = self.summary.iter().map(|c| c.against).collect();
        let ours: Vec<&Record> = self.records.iter().filter(|r| r.implementation == Implementation::Flashrs).collect();
        let verified = ours.iter().any(|r| r.verified_rows.is_some());
        // Others checked against our reference on our inputs (FlashAttention-3 on FP8 rows):
        // their error beside ours.
        let checked: Vec<Implementation> = others.iter().copied().filter(|&o| self.records.iter().any(|r| r.implementation == o && r.verified_rows.is_some())).collect();
        // Plain runs keep their table as it was; runs with modifications name them per row.
        let modified = self.records.iter().any(|r| !r.mods.is_plain());
        // Decode tables (every row at most 16 query rows) compare K+V read bandwidth.
        let decode = !ours.is_empty() && ours.iter().all(|r| r.shape.seqlen_q <= 16);
        let mut head: Vec<(String, Align)> =
            ["B", "Hq", "Hkv", "Sq", "Sk", "D", "causal"].iter().map(|h| (h.to_string(), Align::Right)).collect();
        if modified {
            head.push(("mods".into(), Align::Left));
        }
        head.extend([("path".to_string(), Align::Left), ("kernel".to_string(), Align::Left)]);
        head.extend(["median ms", "min ms", "TFLOPS", "GB/s"].iter().map(|h| (h.to_string(), Align::Right)));
        if decode {
            head.push(("K+V GB/s".into(), Align::Right));
        }
        if verified {
            head.push(("max err".into(), Align::Right));
        }
        head.extend(checked.iter().map(|o| (format!("{} max err", o.name()), Align::Right)));
        for o in &others {
            head.push((format!("{} {}", o.name(), if decode { "K+V GB/s" } else { "TFLOPS" }), Align::Right));
            head.push(("ours/theirs".into(), Align::Right));
        }
        let rows: Vec<Vec<String>> = ours
            .iter()
            .map(|r| {
                let s = &r.shape;
                let mut row: Vec<String> = [s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k].iter().map(usize::to_string).collect();
                row.extend([s.dims(), if s.causal { "on" } else { "off" }.to_string()]);
                if modified {
                    row.push(r.mods.label());
                }
                row.extend([r.path.clone(), r.kernel.clone()]);
                row.extend([num(r.median_ms, 3), num(r.min_ms, 3), num(r.tflops, 1), num(r.gbps, 0)]);
                if decode {
                    row.push(num(r.kv_gbps, 0));
                }
                let err = |r: Option<&Record>| r.and_then(|r| r.max_abs_err).map_or("-".into(), |e| format!("{e:.1e}"));
                if verified {
                    row.push(err(Some(r)));
                }
                row.extend(checked.iter().map(|&o| err(compare::find(&self.records, o, r))));
                for &o in &others {
                    let theirs = compare::find(&self.records, o, r);
                    row.push(if decode { num(theirs.and_then(|t| t.kv_gbps), 0) } else { num(theirs.and_then(|t| t.tflops), 1) });
                    row.push(self.ratio_cell(o, r));
                }
                row
            })
            .collect();
        let windowed = if self.records.iter().any(|r| r.mods.has_window()) { "; with a window, of the (query, key) pairs it lets through" } else { "" };
        // Runs whose V is as wide as K keep the formula they always printed.
        let formula = match self.records.iter().any(|r| r.shape.head_dim_v.is_some()) {
            true => "2*B*Hq*Sq*Sk*(D+Dv)",
            false => "4*B*Hq*Sq*Sk*D",
        };
        let mut out = format!(
            "flashrs benchmark on {} ({}; {} warm-up + {} timed launches per row, {} timing; TFLOPS = {formula} / median, halved when causal{windowed})\n",
            self.device, self.dtype, self.warmup, self.iters, self.timing
        );
        if let Some(n) = self.rounds {
            out += &format!("{n} interleaved rounds per row, ours and theirs back to back: times are the median of the rounds' medians, ours/theirs the median of the rounds' ratios (lowest-highest)\n");
        }
        if let Some(s) = &self.startup {
            out += &format!("GPU opened in {:.0} ms (driver, context, kernels from {})\n", s.ms, s.kernel_image);
        }
        out += &render(&head, &rows);
        out += &self.footer();
        out
    }

    /// Ours/theirs on `ours`'s problem against `against`: with rounds, the median of the
    /// rounds' ratios and their range; else the ratio of the two medians.
    pub fn ratio_cell(&self, against: Implementation, ours: &Record) -> String {
        if self.rounds.is_some() {
            return match self.interleaved.iter().find(|i| i.is_of(against, ours)) {
                Some(i) => format!("{:.2}x ({:.2}-{:.2})", i.median, i.min, i.max),
                None => "n/a".into(),
            };
        }
        compare::find(&self.records, against, ours).and_then(|t| compare::speedup(ours, t)).map_or("n/a".into(), |x| format!("{x:.2}x"))
    }

    /// Lines under the table: torch version or why it was skipped, geomeans, n/a reasons.
    fn footer(&self) -> String {
        let mut out = String::new();
        if let Some(t) = &self.torch {
            out += &format!("torch {} on {} (cuDNN {})\n", t.torch, t.device, t.cudnn.map_or("n/a".into(), |v| v.to_string()));
        }
        if let Some(why) = &self.torch_unavailable {
            out += &format!("torch comparison skipped: {why}\n");
        }
        for c in &self.summary {
            let g = |x: Option<f64>| x.map_or("n/a".into(), |x| format!("{x:.3}x"));
            out += &format!(
                "geomean flashrs/{}{}: {} over {} shapes; {} over {} shapes with seqlen >= {LONG_SEQLEN}\n",
                c.against.name(),
                if self.rounds.is_some() { " (of the rows' median ratios)" } else { "" },
                g(c.geomean),
                c.rows,
                g(c.geomean_seqlen_ge_2048),
                c.rows_seqlen_ge_2048
            );
        }
        for r in self.records.iter().filter(|r| r.median_ms.is_none()) {
            out += &format!("n/a {} {}: {}\n", r.implementation.name(), r.label(), r.note.as_deref().unwrap_or("no time"));
        }
        // Remarks on others' timed rows (FlashAttention-3's check that could not run, say).
        for r in self.records.iter().filter(|r| r.median_ms.is_some() && r.implementation != Implementation::Flashrs) {
            if let Some(note) = &r.note {
                out += &format!("note {} {}: {note}\n", r.implementation.name(), r.label());
            }
        }
        out
    }
}

/// Today's date (UTC), `YYYY-MM-DD`.
pub fn today() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `x` with `decimals` places, or "n/a".
fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or("n/a".into(), |x| format!("{x:.decimals$}"))
}

/// One CSV field (RFC 4180 quoting; null is empty).
fn csv_cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if s.contains([',', '"', '\n', '\r']) => format!("\"{}\"", s.replace('"', "\"\"")),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Column alignment in the table.
#[derive(Clone, Copy)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A plain-text table: header, dashes, rows, columns padded to their widest cell.
pub fn render(head: &[(String, Align)], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        head.iter().enumerate().map(|(i, (h, _))| rows.iter().map(|r| r[i].len()).chain([h.len()]).max().unwrap_or(0)).collect();
    let line = |cells: &mut dyn Iterator<Item = &String>| {
        let padded: Vec<String> = cells
            .zip(head.iter().zip(&widths))
            .map(|(c, ((_, align), &w))| match align {
                Align::Left => format!("{c:<w$}"),
                Align::Right => format!("{c:>w$}"),
            })
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&mut head.iter().map(|(h, _)| h));
    out += &(widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("  ") + "\n");
    for r in rows {
        out += &line(&mut r.iter());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mods::ModSpec;
    use crate::sweep::Shape;

    fn sample() -> Report {
        let s = Shape { batch: 8, heads_q: 16, heads_kv: 16, seqlen_q: 2048, seqlen_k: 2048, head_dim: 128, head_dim_v: None, causal: true };
        let mut ours = Record::new(Implementation::Flashrs, s, "f16", "mma.sync", "flash_fwd_f16_d128_128x64w8s2").timed(0.6, 0.55);
        ours.config = Some("d128_128x64w8s2".into());
        (ours.max_abs_err, ours.verified_rows) = (Some(4.1e-4), Some(64));
        let fa2 = Record::new(Implementation::TorchFa2, s, "f16", "torch", "sdpa").timed(0.51, 0.5);
        let cudnn = Record::new(Implementation::TorchCudnn, s, "f16", "torch", "").unavailable("No available kernel, \"why\"");
        Report::new("NVIDIA H100 80GB HBM3 (Sm90a)".into(), "f16", 5, 20, vec![ours, fa2, cudnn])
    }

    #[test]
    fn csv_columns_are_exactly_the_record_fields() {
        let r = sample();
        let fields = serde_json::to_value(&r.records[0]).unwrap();
        let mut keys: Vec<&str> = fields.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let mut cols = CSV_COLUMNS.to_vec();
        cols.sort();
        assert_eq!(keys, cols);
        // A record with V's own head dimension has one more field: the optional column.
        let mut dv = r.records[0].clone();
        dv.shape.head_dim_v = Some(64);
        let fields = serde_json::to_value(&dv).unwrap();
        let extra: Vec<&String> = fields.as_object().unwrap().keys().filter(|k| !CSV_COLUMNS.contains(&k.as_str())).collect();
        assert_eq!(extra, [CSV_HEAD_DIM_V]);
    }

    #[test]
    fn csv_quotes_and_leaves_missing_values_empty() {
        let csv = sample().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("implementation,batch,heads_q,"));
        assert!(
            lines[1].starts_with("flashrs,8,16,16,2048,2048,128,true,f16,mma.sync,flash_fwd_f16_d128_128x64w8s2,d128_128x64w8s2,0.6,0.55,")
        );
        assert!(lines[3].starts_with("torch-cudnn,") && lines[3].ends_with(",,,\"No available kernel, \"\"why\"\"\","), "{}", lines[3]);
    }

    #[test]
    fn modifications_are_named_in_every_format() {
        let mods = ModSpec { window: (Some(4096), Some(0)), softcap: Some(30.0), ..ModSpec::default() };
        let mut r = sample();
        for x in &mut r.records {
            x.mods = mods;
        }
        let why = "PyTorch SDPA's flash backend takes no sliding window or softcap (not timed on another problem)";
        r.records[1] = Record::new(Implementation::TorchFa2, r.records[1].shape, "f16", "torch", "").with_mods(mods).unavailable(why);
        let r = Report { summary: compare::summarize(&r.records), ..r };
        let csv = r.to_csv();
        assert!(csv.lines().nth(1).unwrap().ends_with(",\"window 4096,0; softcap 30\""), "{csv}");
        let json: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["records"][0]["mods"], "window 4096,0; softcap 30");
        let t = r.table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("halved when causal; with a window, of the (query, key) pairs it lets through"), "{t}");
        assert!(lines[1].contains("causal  mods") && lines[3].contains(" on  window 4096,0; softcap 30  mma.sync"), "{t}");
        assert!(t.contains(&format!("n/a torch-fa2 B=8 Hq=16 Hkv=16 Sq=2048 Sk=2048 D=128 causal [window 4096,0; softcap 30]: {why}")), "{t}");
        // Plain tables are unchanged: no mods column.
        assert!(!sample().table().contains("mods"));
    }

    #[test]
    fn head_dim_v_is_shown_in_every_format_and_only_when_given() {
        let plain = sample();
        let mut r = sample();
        for x in &mut r.records {
            x.shape = Shape { head_dim: 192, head_dim_v: Some(128), ..x.shape };
        }
        let r = Report { summary: compare::summarize(&r.records), ..r };
        let json: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!((&json["records"][0]["head_dim"], &json["records"][0]["head_dim_v"]), (&Value::from(192), &Value::from(128)));
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert!(back.records.iter().zip(&r.records).all(|(b, r)| b.shape == r.shape));
        let csv = r.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].ends_with(",note,mods,head_dim_v"), "{csv}");
        assert!(lines[1].starts_with("flashrs,8,16,16,2048,2048,192,true,") && lines[1].ends_with(",,128"), "{csv}");
        let t = r.table();
        let table: Vec<&str> = t.lines().collect();
        assert!(table[0].contains("TFLOPS = 2*B*Hq*Sq*Sk*(D+Dv) / median, halved when causal"), "{t}");
        assert_eq!(table[3].split_whitespace().take(8).collect::<Vec<_>>(), ["8", "16", "16", "2048", "2048", "192/128", "on", "mma.sync"], "{t}");
        assert!(t.contains("n/a torch-cudnn B=8 Hq=16 Hkv=16 Sq=2048 Sk=2048 D=192/128 causal:"), "{t}");
        // Their rows of the same problem pair with ours.
        assert!(table[3].contains("0.85x"), "{t}");
        // Runs without it: no key, no column, the formula they always printed.
        assert!(!plain.to_json().contains("head_dim_v") && !plain.to_csv().contains("head_dim_v"));
        assert!(plain.table().contains("TFLOPS = 4*B*Hq*Sq*Sk*D / median"));
    }

    #[test]
    fn json_has_stable_top_level_fields_and_summary() {
        let v: Value = serde_json::from_str(&sample().to_json()).unwrap();
        for key in ["schema", "date", "command", "device", "dtype", "warmup", "iters", "timing", "startup", "torch", "torch_unavailable", "records", "summary"] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["records"][0]["implementation"], "flashrs");
        assert_eq!(v["records"][2]["median_ms"], Value::Null);
        assert_eq!(v["summary"][0]["against"], "torch-fa2");
        assert_eq!(v["summary"][0]["rows"], 1);
    }

    #[test]
    fn rounds_show_median_ratios_with_their_range_and_read_back() {
        let mut r = sample();
        let plain_json = r.to_json();
        let ours = r.records[0].clone();
        r.rounds = Some(3);
        r.interleaved = vec![Interleaved { against: Implementation::TorchFa2, shape: ours.shape, mods: ours.mods, ratios: vec![0.8, 0.9, 0.86], median: 0.86, min: 0.8, max: 0.9 }];
        r.summary = compare::summarize_interleaved(&r.records, &r.interleaved);
        let t = r.table();
        assert!(t.contains("3 interleaved rounds per row"), "{t}");
        // Not the ratio of the medians (0.85x): the rounds' median, and its range.
        assert!(t.lines().nth(4).unwrap().contains("0.86x (0.80-0.90)"), "{t}");
        assert!(t.contains("geomean flashrs/torch-fa2 (of the rows' median ratios): 0.860x over 1 shapes"), "{t}");
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!((back.rounds, &back.interleaved), (Some(3), &r.interleaved));
        // Runs without rounds write neither key.
        assert!(!plain_json.contains("interleaved") && !plain_json.contains("\"rounds\""));
        assert_eq!(serde_json::from_str::<Report>(&plain_json).unwrap().rounds, None);
    }

    #[test]
    fn fa3_checked_on_our_inputs_shows_its_error_beside_ours_in_every_format() {
        let s = Shape { batch: 8, heads_q: 16, heads_kv: 16, seqlen_q: 2048, seqlen_k: 2048, head_dim: 128, head_dim_v: None, causal: true };
        let fp8 = Some(flashrs::Fp8::E4m3);
        let mut ours = Record::new(Implementation::Flashrs, s, "e4m3", "auto", "flash_fwd_sm90_e4m3_d128").with_kv(fp8).timed(0.3, 0.29);
        (ours.max_abs_err, ours.verified_rows) = (Some(2.5e-2), Some(64));
        let mut fa3 = Record::new(Implementation::Fa3, s, "e4m3", "torch", "fa3_fwd_interface.flash_attn_func(e4m3)").with_kv(fp8).timed(0.33, 0.32);
        (fa3.max_abs_err, fa3.verified_rows) = (Some(3.1e-2), Some(64));
        let other = Shape { causal: false, ..s };
        let ours2 = Record::new(Implementation::Flashrs, other, "e4m3", "auto", "k").with_kv(fp8).timed(0.6, 0.6);
        let fa3_2 = Record::new(Implementation::Fa3, other, "e4m3", "torch", "fa3").timed(0.6, 0.6);
        let fa3_2 = Record { note: Some("not verified on flashrs's inputs: the torch script stopped".into()), ..fa3_2 };
        let r = Report::new("H100".into(), "e4m3", 5, 20, vec![ours, ours2, fa3, fa3_2]);
        let t = r.table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].contains("max err  fa3 max err  fa3 TFLOPS  ours/theirs"), "{t}");
        let tail = |i: usize| lines[i].split_whitespace().rev().take(4).collect::<Vec<_>>();
        assert_eq!(tail(3), ["1.10x", "416.5", "3.1e-2", "2.5e-2"], "{t}");
        // A row whose FA3 check did not run: a dash, and why under the table.
        assert_eq!(tail(4)[2], "-", "{t}");
        assert!(t.contains("note fa3 B=8 Hq=16 Hkv=16 Sq=2048 Sk=2048 D=128 non-causal: not verified on flashrs's inputs: the torch script stopped"), "{t}");
        // JSON and CSV: FA3's record carries them as ours does.
        let json: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!((&json["records"][2]["max_abs_err"], &json["records"][2]["verified_rows"]), (&Value::from(3.1e-2), &Value::from(64)));
        let csv = r.to_csv();
        assert!(csv.lines().nth(3).unwrap().contains(",0.031,64,"), "{csv}");
        // Runs where no other implementation was checked have no such column.
        assert!(!sample().table().contains("torch-fa2 max err"));
    }

    #[test]
    fn table_shows_ratios_geomeans_and_reasons() {
        let t = sample().table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("TFLOPS = 4*B*Hq*Sq*Sk*D"));
        assert!(lines[1].contains("torch-fa2 TFLOPS") && lines[1].contains("torch-cudnn TFLOPS") && lines[1].contains("max err"));
        // Columns line up: every row as long as the dashes under the header.
        assert!(lines[3].len() <= lines[2].len());
        let row = lines[3];
        assert!(row.contains("flash_fwd_f16_d128_128x64w8s2") && row.contains("0.85x"), "{row}");
        assert_eq!(row.split_whitespace().rev().take(2).collect::<Vec<_>>(), ["n/a", "n/a"], "{row}");
        assert!(t.contains("geomean flashrs/torch-fa2: 0.850x over 1 shapes; 0.850x over 1 shapes with seqlen >= 2048"), "{t}");
        assert!(t.contains("n/a torch-cudnn B=8 Hq=16 Hkv=16 Sq=2048 Sk=2048 D=128 causal: No available kernel"), "{t}");
    }
}
