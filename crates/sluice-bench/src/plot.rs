//! Line plots (SVG) for sweeps: one series per target. plotters' SVG backend needs
//! no fonts, so plots work on a bare server.

use plotters::prelude::*;
use std::path::Path;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub fn line_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = pts().fold(0.0f64, |a, p| a.max(p.1)) * 1.1 + 1e-9;
    if x0 >= x1 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    macro_rules! draw {
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
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
            .map_err(|e| err(&e))?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(|e| err(&e))?);
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
