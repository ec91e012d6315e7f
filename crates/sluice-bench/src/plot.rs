//! Line plots for sweeps, one series per target, as SVG and PNG. Text is laid out
//! with a TrueType font (DejaVu Sans, Debian's fonts-dejavu-core); without one the
//! plots are skipped with a note, and the tables (CSV) are still written.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Register a font for bitmap text once; false if none could be loaded.
fn font_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        for f in FONTS {
            if let Ok(bytes) = std::fs::read(f) {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Draw `series` to `<stem>.svg` and `<stem>.png`. Returns what was written (or why not).
pub fn line(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<Vec<String>, String> {
    if !font_ready() {
        return Ok(vec![
            "(no plots: no TrueType font; apt-get install fonts-dejavu-core)".into(),
        ]);
    }
    let svg = stem.with_extension("svg");
    draw(
        SVGBackend::new(&svg, (900, 540)).into_drawing_area(),
        &svg,
        title,
        x_label,
        y_label,
        series,
        log_x,
    )?;
    let png = stem.with_extension("png");
    draw(
        BitMapBackend::new(&png, (900, 540)).into_drawing_area(),
        &png,
        title,
        x_label,
        y_label,
        series,
        log_x,
    )?;
    Ok(vec![svg.display().to_string(), png.display().to_string()])
}

#[allow(clippy::too_many_arguments)]
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Debug| format!("plot {}: {e:?}", path.display());
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = pts().fold(0.0f64, |a, p| a.max(p.1)) * 1.1 + 1e-9;
    if x0 >= x1 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    macro_rules! plot {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let c = colors[i % colors.len()];
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    if log_x && x0 > 0.0 {
        plot!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
            .map_err(|e| err(&e))?);
    } else {
        plot!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(|e| err(&e))?);
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
