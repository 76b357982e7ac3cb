//! `--plot`: TFLOPS against sequence length, one panel per (causal, head dimensions), one line per
//! implementation (and per tile configuration when a run timed several).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use super::record::{Implementation, Record};
use super::report::Report;
use super::sweep::dims_label;

/// The font every label is drawn with, shipped so that PNGs get text on machines without
/// system fonts (see `assets/DejaVuSans-LICENSE.txt`).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans-ascii.ttf");
/// Size of one panel in pixels (SVG units).
const PANEL: (u32, u32) = (560, 400);
/// Height of the title band above the panels.
const TITLE_HEIGHT: u32 = 44;

/// Output formats, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.svg`: text stays text.
    Svg,
    /// `.png`: rasterized with the shipped font.
    Png,
}

impl Format {
    /// The format for `path`'s extension (clap value parser for `--plot` checks it up front,
    /// so a run does not end without its plot).
    pub fn of(path: &Path) -> Result<Format, String> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(format!("{}: plots are written as .svg or .png", path.display())),
        }
    }
}

/// Draws `report` into `path` (format by extension).
pub fn write(path: &Path, report: &Report) -> Result<(), String> {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font is a constant of this program: failing to parse it is a build defect.
        assert!(register_font("sans-serif", FontStyle::Normal, FONT).is_ok(), "the shipped font does not parse");
    });
    let panels = Panels::of(report);
    let size = (PANEL.0 * panels.head_dims.len().max(1) as u32, PANEL.1 * panels.causal.len().max(1) as u32 + TITLE_HEIGHT);
    let err = |e: String| format!("writing {}: {e}", path.display());
    match Format::of(path)? {
        Format::Svg => draw(SVGBackend::new(path, size).into_drawing_area(), report, &panels).map_err(err),
        Format::Png => draw(BitMapBackend::new(path, size).into_drawing_area(), report, &panels).map_err(err),
    }
}

/// The grid: rows are causal off/on, columns head dimensions, each only where timed.
struct Panels {
    /// Causal settings, one row of panels each (off first).
    causal: Vec<bool>,
    /// Head dimensions (Q and K's, V's), one column each (smallest first).
    head_dims: Vec<(usize, usize)>,
}

impl Panels {
    /// The grid for the timed records of `report`.
    fn of(report: &Report) -> Self {
        let timed = || report.records.iter().filter(|r| r.tflops.is_some());
        let mut causal: Vec<bool> = timed().map(|r| r.shape.causal).collect();
        let mut head_dims: Vec<(usize, usize)> = timed().map(|r| (r.shape.head_dim, r.shape.head_dim_v())).collect();
        causal.sort();
        causal.dedup();
        head_dims.sort();
        head_dims.dedup();
        Panels { causal, head_dims }
    }
}

/// One line of a panel.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    /// Legend text.
    label: String,
    /// Whose times these are (sets the colour and order).
    implementation: Implementation,
    /// (seqlen_q, TFLOPS), by seqlen.
    points: Vec<(usize, f64)>,
}

/// The lines of the panel for (`causal`, `dims`: Q and K's head dimension, V's): one per
/// implementation, ours split by tile configuration when the report holds several per shape.
fn series(records: &[Record], causal: bool, dims: (usize, usize)) -> Vec<Series> {
    let per_config = records
        .iter()
        .filter(|r| r.implementation == Implementation::Flashrs)
        .any(|r| records.iter().filter(|o| o.implementation == r.implementation && o.shape == r.shape).count() > 1);
    let mut out: Vec<Series> = Vec::new();
    for r in records.iter().filter(|r| r.shape.causal == causal && (r.shape.head_dim, r.shape.head_dim_v()) == dims) {
        let Some(tflops) = r.tflops else { continue };
        let label = match (&r.config, per_config && r.implementation == Implementation::Flashrs) {
            (Some(c), true) => format!("{} {c}", r.implementation.name()),
            _ => r.implementation.name().to_string(),
        };
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((r.shape.seqlen_q, tflops)),
            None => out.push(Series { label, implementation: r.implementation, points: vec![(r.shape.seqlen_q, tflops)] }),
        }
    }
    for s in &mut out {
        s.points.sort_by_key(|p| p.0);
    }
    out.sort_by_key(|s| s.implementation);
    out
}

/// Line colour; `index` counts our series within a panel.
fn color(implementation: Implementation, index: usize) -> RGBColor {
    match implementation {
        // Several configurations of ours get distinct colours; one gets the house blue.
        Implementation::Flashrs if index > 0 => {
            let (r, g, b) = Palette99::pick(index + 5).rgb();
            RGBColor(r, g, b)
        }
        Implementation::Flashrs => RGBColor(31, 119, 180),
        Implementation::TorchFa2 => RGBColor(255, 127, 14),
        Implementation::TorchCudnn => RGBColor(44, 160, 44),
        Implementation::Fa3 => RGBColor(214, 39, 40),
        Implementation::TorchFlex => RGBColor(148, 103, 189),
    }
}

/// What plotters' drawing calls return on backend `DB`.
type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws everything and flushes the file, with errors as text.
fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, report: &Report, panels: &Panels) -> Result<(), String> {
    draw_all(&root, report, panels).and_then(|_| root.present()).map_err(|e| e.to_string())
}

/// The title and every panel.
fn draw_all<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &Report, panels: &Panels) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    // A run with modifications says so: its figures are not plain attention's.
    let mods = report.records.iter().find(|r| !r.mods.is_plain()).map_or(String::new(), |r| format!(" ({})", r.mods));
    let title = format!("Attention forward{mods}, {} - {} (TFLOPS at the median time)", report.dtype, report.device);
    let (top, body) = root.split_vertically(TITLE_HEIGHT);
    top.titled(&title, ("sans-serif", 22))?;
    let cells = body.split_evenly((panels.causal.len().max(1), panels.head_dims.len().max(1)));
    for (i, &causal) in panels.causal.iter().enumerate() {
        for (j, &dims) in panels.head_dims.iter().enumerate() {
            let cell = &cells[i * panels.head_dims.len() + j];
            panel(cell, &series(&report.records, causal, dims), causal, dims)?;
        }
    }
    Ok(())
}

/// One panel: axes, a line with markers per series, and the legend.
fn panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, lines: &[Series], causal: bool, (head_dim, head_dim_v): (usize, usize)) -> DrawResult<DB> {
    // The x axis is the index of each distinct seqlen: evenly spaced, which is a log scale for
    // the sweep's powers of two, and every tick is a measured length.
    let mut seqlens: Vec<usize> = lines.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    seqlens.sort();
    seqlens.dedup();
    let x = |s: usize| seqlens.binary_search(&s).unwrap_or_default() as i32;
    let y_max = lines.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1.0f64, f64::max) * 1.15;
    let caption = format!("head_dim {}, {}", dims_label(head_dim, head_dim_v), if causal { "causal" } else { "non-causal" });
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(-1..seqlens.len() as i32, 0.0..y_max)?;
    let x_label = |i: &i32| usize::try_from(*i).ok().and_then(|i| seqlens.get(i)).map_or(String::new(), usize::to_string);
    chart
        .configure_mesh()
        .x_desc("seqlen")
        .y_desc("TFLOPS")
        .x_labels(seqlens.len() + 2)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE)
        .draw()?;
    let mut ours = 0;
    for s in lines {
        let c = color(s.implementation, if s.implementation == Implementation::Flashrs { ours } else { 0 });
        ours += (s.implementation == Implementation::Flashrs) as usize;
        let width = if s.implementation == Implementation::Flashrs { 3 } else { 2 };
        let points: Vec<(i32, f64)> = s.points.iter().map(|&(s, y)| (x(s), y)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(width)))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(width)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::{Shape, SweepSpec};

    /// A sweep with made-up times roughly shaped like the H100's.
    fn synthetic(configs: &[&str]) -> Report {
        let shapes = SweepSpec { causal: vec![false, true], ..Default::default() }.shapes().unwrap();
        let mut records = Vec::new();
        let ms = |s: &Shape, tflops: f64| s.flops() / (tflops * 1e12) * 1e3;
        let ramp = |s: &Shape| (s.seqlen_q as f64).log2() / 14.0 * if s.causal { 0.85 } else { 1.0 };
        for s in &shapes {
            for (i, c) in configs.iter().enumerate() {
                let mut r =
                    Record::new(Implementation::Flashrs, *s, "f16", "mma.sync", "k").timed(ms(s, 330.0 * ramp(s) - 20.0 * i as f64), 0.0);
                r.config = Some(c.to_string());
                records.push(r);
            }
            records.push(Record::new(Implementation::TorchFa2, *s, "f16", "torch", "sdpa").timed(ms(s, 300.0 * ramp(s)), 0.0));
            let cudnn = Record::new(Implementation::TorchCudnn, *s, "f16", "torch", "sdpa");
            records.push(if s.seqlen_q == 512 && s.head_dim == 256 {
                cudnn.unavailable("refused")
            } else {
                cudnn.timed(ms(s, 560.0 * ramp(s)), 0.0)
            });
        }
        Report::new("NVIDIA H100 80GB HBM3 (synthetic)".into(), "f16", 5, 20, records)
    }

    #[test]
    fn formats_by_extension() {
        assert_eq!(Format::of(Path::new("a/b.SVG")), Ok(Format::Svg));
        assert_eq!(Format::of(Path::new("b.png")), Ok(Format::Png));
        assert!(Format::of(Path::new("b.pdf")).is_err() && Format::of(Path::new("b")).is_err());
    }

    #[test]
    fn series_split_ours_by_config_only_when_several_ran() {
        let one = synthetic(&["d128_128x64w8s2"]);
        let labels: Vec<String> = series(&one.records, true, (128, 128)).into_iter().map(|s| s.label).collect();
        assert_eq!(labels, ["flashrs", "torch-fa2", "torch-cudnn"]);
        let two = synthetic(&["d128_a", "d128_b"]);
        let lines = series(&two.records, false, (256, 256));
        assert_eq!(
            lines.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(),
            ["flashrs d128_a", "flashrs d128_b", "torch-fa2", "torch-cudnn"]
        );
        assert_eq!(lines[0].points.len(), 6);
        // The refused shape leaves a gap, not a zero.
        assert_eq!(lines[3].points.len(), 5);
    }

    #[test]
    fn renders_png_and_svg_with_text() {
        // A fixed place, overwritten by each run, so the pictures can be looked at afterwards.
        let dir = std::env::temp_dir().join("flashrs-plot-test");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, report) in [("sweep", synthetic(&["d64_128x64w4s2"])), ("configs", synthetic(&["d128_a", "d128_b"]))] {
            let png = dir.join(format!("{name}.png"));
            let svg = dir.join(format!("{name}.svg"));
            write(&png, &report).unwrap();
            write(&svg, &report).unwrap();
            let png_bytes = std::fs::read(&png).unwrap();
            assert!(png_bytes.starts_with(b"\x89PNG") && png_bytes.len() > 20_000, "{} bytes", png_bytes.len());
            let svg_text = std::fs::read_to_string(&svg).unwrap();
            assert!(svg_text.contains("head_dim 128, causal") && svg_text.contains("torch-cudnn"));
        }
        assert!(write(&dir.join("x.pdf"), &synthetic(&["c"])).is_err());
    }
}
