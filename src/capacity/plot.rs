//! `bench --capacity --plot FILE.svg|png`: latency and throughput against the stream count.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::streams::{CapacityReport, Step};

/// Draw the capacity report to `path` (SVG or PNG by extension).
pub fn draw(report: &CapacityReport, path: &Path) -> Result<(), String> {
    crate::bench::plot::register_font()?;
    let size = (1000, 720);
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            render(&root, report)?;
            root.present().map_err(|e| e.to_string())
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            render(&root, report)?;
            root.present().map_err(|e| e.to_string())
        }
        _ => Err(format!("{}: --plot writes .svg or .png", path.display())),
    }
}

fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &CapacityReport) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(360);
    let mut steps: Vec<&Step> = r.steps.iter().collect();
    steps.sort_by_key(|s| s.streams);
    let n_max = steps.last().map_or(1, |s| s.streams) as f64 + 0.5;
    let lat_max = steps.iter().map(|s| s.measured.latency_ms.p99).fold(r.latency_budget_ms, f64::max) * 1.15;
    let mut c = ChartBuilder::on(&top)
        .caption(
            format!(
                "{}: {} stream{} within p99 < {:.0} ms (latency against streams)",
                Path::new(&r.pipeline).file_name().map_or(r.pipeline.clone(), |n| n.to_string_lossy().into_owned()),
                r.streams,
                if r.streams == 1 { "" } else { "s" },
                r.latency_budget_ms
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5f64..n_max, 0f64..lat_max)
        .map_err(e)?;
    c.configure_mesh().x_desc("streams").y_desc("latency ms").draw().map_err(e)?;
    for (name, color, f) in
        [("p50", BLUE, (|s: &Step| s.measured.latency_ms.p50) as fn(&Step) -> f64), ("p99", RED, |s: &Step| s.measured.latency_ms.p99)]
    {
        c.draw_series(LineSeries::new(steps.iter().map(|s| (s.streams as f64, f(s))), color.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color));
        c.draw_series(steps.iter().map(|s| Circle::new((s.streams as f64, f(s)), 4, if s.ok { color.filled() } else { BLACK.filled() })))
            .map_err(e)?;
    }
    c.draw_series(LineSeries::new([(0.5, r.latency_budget_ms), (n_max, r.latency_budget_ms)], BLACK.mix(0.5)))
        .map_err(e)?
        .label("budget")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.5)));
    c.configure_series_labels().border_style(BLACK.mix(0.3)).background_style(WHITE.mix(0.8)).draw().map_err(e)?;

    let fps_max = steps.iter().map(|s| s.measured.fps.max(s.measured.source_fps * s.streams as f64)).fold(1.0, f64::max) * 1.15;
    let mut c = ChartBuilder::on(&bottom)
        .caption("throughput (black dots: the count failed)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5f64..n_max, 0f64..fps_max)
        .map_err(e)?;
    c.configure_mesh().x_desc("streams").y_desc("frames/s").draw().map_err(e)?;
    let offered = |s: &Step| s.measured.source_fps * s.streams as f64;
    for (name, color, f) in [
        ("processed fps, all streams", BLUE, (|s: &Step| s.measured.fps) as fn(&Step) -> f64),
        ("offered fps (streams × source rate)", GREEN, offered),
        ("slowest stream × streams", MAGENTA, |s: &Step| s.measured.stream_fps_min * s.streams as f64),
    ] {
        c.draw_series(LineSeries::new(steps.iter().map(|s| (s.streams as f64, f(s))), color.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color));
        c.draw_series(steps.iter().map(|s| Circle::new((s.streams as f64, f(s)), 4, if s.ok { color.filled() } else { BLACK.filled() })))
            .map_err(e)?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK.mix(0.3))
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(e)?;
    Ok(())
}
