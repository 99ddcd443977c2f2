//! Line charts for benchmarks: SVG, or PNG when the file name ends in `.png`.
//!
//! plotters draws both. PNG text needs a TrueType font; ganges finds one among the usual
//! system locations (the install script installs DejaVu) instead of shipping one.

use crate::util::{BenchError, BenchResult};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    /// Draw in this palette colour instead of the series' own (several series as one; a
    /// dashed series is black without one).
    pub color: Option<usize>,
    /// Leave out of the legend (another series of the same colour names it).
    pub unlabelled: bool,
}

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Register a sans-serif font with plotters once; false if none is found.
fn ensure_font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_max: f64,
) -> BenchResult<()> {
    if !ensure_font() {
        return Err(BenchError::Failed(format!(
            "no TrueType font found for the plot's text (looked in {}); install fonts-dejavu-core",
            FONT_PATHS[0]
        )));
    }
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x_max = xs.clone().fold(1.0f64, f64::max);
    let x_min = xs.fold(0.0f64, f64::min);
    let png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let range = (x_min, x_max);
    let result = if png {
        render(BitMapBackend::new(path, SIZE).into_drawing_area(), title, x_label, y_label, series, range, y_max)
    } else {
        render(SVGBackend::new(path, SIZE).into_drawing_area(), title, x_label, y_label, series, range, y_max)
    };
    result.map_err(|e| BenchError::Failed(format!("drawing {}: {e}", path.display())))?;
    Ok(())
}

/// Plot size in pixels.
const SIZE: (u32, u32) = (900, 560);

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_range: (f64, f64),
    y_max: f64,
) -> Result<(), String> {
    draw(&root, title, x_label, y_label, series, x_range, y_max)?;
    root.present().map_err(|e| e.to_string())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    (x_min, x_max): (f64, f64),
    y_max: f64,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        // Short spans tick at fractions: show them, instead of repeating rounded labels.
        .x_label_formatter(&|x| if x_max - x_min < 10.0 { format!("{x:.1}") } else { format!("{x:.0}") })
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        // Dashed lines are models (black) unless given a colour of their own.
        let color = match (s.dashed, s.color) {
            (true, None) => BLACK,
            (_, c) => COLORS[c.unwrap_or(i) % COLORS.len()],
        };
        let style = color.stroke_width(2);
        if s.dashed {
            let drawn = chart
                .draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 6, style))
                .map_err(|e| e.to_string())?;
            if !s.unlabelled {
                drawn
                    .label(&s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            }
        } else {
            let drawn =
                chart.draw_series(LineSeries::new(s.points.iter().copied(), style)).map_err(|e| e.to_string())?;
            if !s.unlabelled {
                drawn
                    .label(&s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            }
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
