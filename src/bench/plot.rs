//! `bench --plot FILE.svg|png`: throughput over time and per-stage latency histograms.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::BenchReport;

/// Fonts plotters may use (pure Rust rendering; DejaVu comes with `fonts-dejavu-core`).
const FONTS: &[&str] = &["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];

pub(crate) fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONTS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| format!("no font found for plots (looked for {})", FONTS.join(", ")))?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "cannot load the plot font".to_string())
    })
    .clone()
}

/// Per-node service-time histogram: (upper bound ms, frames) per log bucket.
pub type Histograms = Vec<(String, Vec<(f64, u64)>)>;

/// Draw the report to `path` (SVG or PNG by extension).
pub fn draw(report: &BenchReport, hists: &Histograms, path: &Path) -> Result<(), String> {
    register_font()?;
    let size = (1100, 800);
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            render(&root, report, hists)?;
            root.present().map_err(|e| e.to_string())
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            render(&root, report, hists)?;
            root.present().map_err(|e| e.to_string())
        }
        _ => Err(format!("{}: --plot writes .svg or .png", path.display())),
    }
}

fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &BenchReport, hists: &Histograms) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(380);

    let t_max = r.timeline.last().map_or(1.0, |s| s.t).max(0.1);
    let fps_max = r.timeline.iter().map(|s| s.fps).fold(1.0, f64::max) * 1.15;
    let mut c = ChartBuilder::on(&top)
        .caption(format!("{}: {:.1} frames/s end to end", r.pipeline, r.fps), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..t_max, 0f64..fps_max)
        .map_err(e)?;
    c.configure_mesh().x_desc("seconds").y_desc("frames/s").draw().map_err(e)?;
    c.draw_series(LineSeries::new(r.timeline.iter().map(|s| (s.t, s.fps)), BLUE.stroke_width(2)))
        .map_err(e)?
        .label("throughput")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLUE));
    c.draw_series(LineSeries::new([(0.0, r.fps), (t_max, r.fps)], BLACK.mix(0.4)))
        .map_err(e)?
        .label("mean")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.4)));
    c.configure_series_labels().border_style(BLACK.mix(0.3)).background_style(WHITE.mix(0.8)).draw().map_err(e)?;

    let lo = hists.iter().flat_map(|(_, h)| h.iter().filter(|b| b.1 > 0).map(|b| b.0)).fold(f64::MAX, f64::min).max(0.001);
    let hi = hists.iter().flat_map(|(_, h)| h.iter().filter(|b| b.1 > 0).map(|b| b.0)).fold(0.0, f64::max).max(lo * 10.0);
    let n_max = hists.iter().flat_map(|(_, h)| h.iter().map(|b| b.1)).max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut c = ChartBuilder::on(&bottom)
        .caption("time per frame in each node", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((lo / 1.5..hi * 1.5).log_scale(), 0f64..n_max)
        .map_err(e)?;
    c.configure_mesh().x_desc("milliseconds (log)").y_desc("frames").draw().map_err(e)?;
    for (i, (name, h)) in hists.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(h.iter().map(|&(x, n)| (x, n as f64)), color.stroke_width(2)))
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    c.configure_series_labels().border_style(BLACK.mix(0.3)).background_style(WHITE.mix(0.8)).draw().map_err(e)?;
    Ok(())
}
