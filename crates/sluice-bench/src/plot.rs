//! Line charts for sweeps, one series per target, as SVG and PNG.
//!
//! Axes speak in the units of what was measured ([`Unit`]): sizes as `100 B`,
//! `1 KiB`, `1 MiB`; counts and rates as `32K`, `200K req/s`; never `200000.0`. The x
//! axis has its ticks at the measured points (the steps of the sweep), drawn by hand
//! below the plot area, so the last one is never cut off and no tick falls between
//! steps. Text is laid out with a TrueType font (DejaVu Sans, Debian's
//! fonts-dejavu-core); without one the charts are skipped with a note, and the tables
//! (CSV) are still written.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How an axis's numbers read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// Bytes, in powers of 1024: `100 B`, `10 KiB`, `1 MiB`.
    Bytes,
    /// A count: `800`, `32K`, `1.5M`.
    Count,
    /// A rate with its unit after it: `200K req/s`.
    Rate(&'static str),
    /// A plain number with a unit after it (`ms`, `%`, `MiB/s`), at most 3 significant digits.
    Suffix(&'static str),
}

/// One axis: what it shows, in which unit, on which scale.
#[derive(Clone, Copy, Debug)]
pub struct Axis {
    pub label: &'static str,
    pub unit: Unit,
    pub log: bool,
}

impl Axis {
    pub fn linear(label: &'static str, unit: Unit) -> Axis {
        Axis {
            label,
            unit,
            log: false,
        }
    }
    pub fn log(label: &'static str, unit: Unit) -> Axis {
        Axis {
            label,
            unit,
            log: true,
        }
    }
}

/// A chart: a title that says what was run and against what, two axes, the series.
pub struct Chart<'a> {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: &'a [Series],
}

/// `v` in `unit`, as a person would write it.
pub fn human(v: f64, unit: Unit) -> String {
    fn trim(x: f64) -> String {
        // 3 significant digits, no trailing ".0"
        let s = if x.abs() >= 100.0 || x == x.trunc() {
            format!("{:.0}", x)
        } else if x.abs() >= 10.0 {
            format!("{:.1}", x)
        } else {
            format!("{:.2}", x)
        };
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
    fn scaled(v: f64, base: f64, names: &[&str]) -> String {
        let mut x = v;
        let mut i = 0;
        while x.abs() >= base && i + 1 < names.len() {
            x /= base;
            i += 1;
        }
        format!("{}{}", trim(x), names[i])
    }
    match unit {
        Unit::Bytes => scaled(v, 1024.0, &[" B", " KiB", " MiB", " GiB", " TiB"]),
        Unit::Count => scaled(v, 1000.0, &["", "K", "M", "G"]),
        Unit::Rate(u) => format!("{} {u}", scaled(v, 1000.0, &["", "K", "M", "G"])),
        Unit::Suffix("") => trim(v),
        Unit::Suffix("%") => format!("{}%", trim(v)),
        Unit::Suffix(u) => format!("{} {u}", trim(v)),
    }
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

impl Chart<'_> {
    /// Draw to `<stem>.svg` and `<stem>.png`. Returns what was written (or why not).
    pub fn draw(&self, stem: &Path) -> Result<Vec<String>, String> {
        if !font_ready() {
            return Ok(vec![
                "(no plots: no TrueType font; apt-get install fonts-dejavu-core)".into(),
            ]);
        }
        let svg = stem.with_extension("svg");
        self.draw_on(SVGBackend::new(&svg, SIZE).into_drawing_area(), &svg)?;
        let png = stem.with_extension("png");
        self.draw_on(BitMapBackend::new(&png, SIZE).into_drawing_area(), &png)?;
        Ok(vec![svg.display().to_string(), png.display().to_string()])
    }

    /// The measured x values, in order, once each.
    fn x_points(&self) -> Vec<f64> {
        let mut xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs
    }

    fn draw_on<DB: DrawingBackend>(
        &self,
        root: DrawingArea<DB, Shift>,
        path: &Path,
    ) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Debug| format!("plot {}: {e:?}", path.display());
        let xs = self.x_points();
        let (mut x0, mut x1) = (
            xs.first().copied().unwrap_or(0.0),
            xs.last().copied().unwrap_or(1.0),
        );
        let y1 = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .fold(0.0f64, |a, p| a.max(p.1))
            * 1.1
            + 1e-9;
        let log_x = self.x.log && x0 > 0.0;
        // A margin on both sides so the first and last ticks' labels fit.
        if log_x {
            (x0, x1) = (x0 / 1.25, x1 * 1.25);
        } else {
            let pad = ((x1 - x0) * 0.04).max(0.5);
            (x0, x1) = (x0 - pad, x1 + pad);
        }
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        let mut b = ChartBuilder::on(&root);
        b.caption(&self.title, ("sans-serif", 20))
            .margin(20)
            .margin_right(40)
            .x_label_area_size(55)
            .y_label_area_size(90);
        let (x_label, y_label, y_unit) = (self.x.label, self.y.label, self.y.unit);
        let tick_style =
            TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        macro_rules! plot {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_labels(0)
                    .x_label_formatter(&|_| String::new())
                    .disable_x_mesh()
                    .x_desc(x_label)
                    .y_desc(y_label)
                    .y_label_formatter(&|v| human(*v, y_unit))
                    .draw()
                    .map_err(|e| err(&e))?;
                for (i, s) in self.series.iter().enumerate() {
                    let c = colors[i % colors.len()];
                    chart
                        .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                        .map_err(|e| err(&e))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(|e| err(&e))?;
                }
                // Ticks and labels at the measured points, below the plot area.
                for &x in &xs {
                    let (px, py) = chart.backend_coord(&(x, 0.0));
                    root.draw(&PathElement::new(vec![(px, py), (px, py + 5)], BLACK))
                        .map_err(|e| err(&e))?;
                    root.draw(&Text::new(
                        human(x, self.x.unit),
                        (px, py + 9),
                        tick_style.clone(),
                    ))
                    .map_err(|e| err(&e))?;
                }
                chart
                    .configure_series_labels()
                    .border_style(BLACK)
                    .background_style(WHITE)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        if log_x {
            plot!(b
                .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
                .map_err(|e| err(&e))?);
        } else {
            plot!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(|e| err(&e))?);
        }
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

const SIZE: (u32, u32) = (960, 560);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_in_human_units() {
        assert_eq!(human(100.0, Unit::Bytes), "100 B");
        assert_eq!(human(1024.0, Unit::Bytes), "1 KiB");
        assert_eq!(human(10240.0, Unit::Bytes), "10 KiB");
        assert_eq!(human(1048576.0, Unit::Bytes), "1 MiB");
        assert_eq!(human(1536.0, Unit::Bytes), "1.5 KiB");
        assert_eq!(human(200_000.0, Unit::Rate("req/s")), "200K req/s");
        assert_eq!(human(32_000.0, Unit::Count), "32K");
        assert_eq!(human(1_000_000.0, Unit::Count), "1M");
        assert_eq!(human(100.0, Unit::Count), "100");
        assert_eq!(human(2.5, Unit::Suffix("ms")), "2.5 ms");
        assert_eq!(human(50.0, Unit::Suffix("%")), "50%");
        assert_eq!(human(0.0, Unit::Rate("req/s")), "0 req/s");
        for v in [1.0, 12.5, 1234.0, 200_000.0, 1e6] {
            assert!(!human(v, Unit::Count).ends_with(".0"), "{v}");
        }
    }

    #[test]
    fn a_chart_is_written_with_a_tick_per_measured_point() {
        let dir = std::env::temp_dir().join(format!("sluice-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let series = [Series {
            name: "a".into(),
            points: vec![(100.0, 1.0), (1024.0, 2.0), (1048576.0, 3.0)],
        }];
        let c = Chart {
            title: "t".into(),
            x: Axis::log("file size", Unit::Bytes),
            y: Axis::linear("requests/s", Unit::Rate("req/s")),
            series: &series,
        };
        let out = c.draw(&dir.join("c")).unwrap();
        if out.len() == 2 {
            let svg = std::fs::read_to_string(dir.join("c.svg")).unwrap();
            for tick in ["100 B", "1 KiB", "1 MiB"] {
                assert!(svg.contains(tick), "{tick} missing");
            }
            assert!(!svg.contains("1048576"), "raw number on an axis");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
