//! `buffer-sweep` (seed 003): read a file with every buffer size in a range.

use super::common::*;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::Table;
use std::io::Read;
use std::time::Instant;

/// Seed 003: read a file with every buffer size in a range; bytes/s per size.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    let file = match &o.file {
        Some(f) => f.clone(),
        None => {
            let f = o.out_dir.join("sweep-100m.bin");
            write_file(&f, 100 << 20)?;
            f
        }
    };
    let mut sizes: Vec<usize> = vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
    let mut s = o.buffer_step.max(1);
    while s <= o.buffer_max {
        sizes.push(s);
        s += o.buffer_step.max(1);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut t = Table::new(&["buffer_bytes", "MiB_per_s"]);
    let mut pts = Vec::new();
    let mut buf = vec![0u8; o.buffer_max.max(512)];
    // Warm the page cache so the sweep measures the read path, not the disk.
    let _ = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut best = (0usize, 0.0f64);
    for &size in &sizes {
        let mut f = std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        // Tiny buffers read fewer bytes, so the sweep ends in reasonable time.
        let limit = o
            .sweep_bytes
            .min((size as u64).saturating_mul(1 << 16))
            .max(1 << 16);
        let start = Instant::now();
        let mut total = 0u64;
        while total < limit {
            match f.read(&mut buf[..size]) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e) => return Err(format!("{}: {e}", file.display())),
            }
        }
        let mbs = total as f64 / start.elapsed().as_secs_f64() / 1048576.0;
        if mbs > best.1 {
            best = (size, mbs);
        }
        pts.push((size as f64, mbs));
        t.push(vec![size.to_string(), fmt(mbs)]);
    }
    let series = [Series {
        name: file.display().to_string(),
        points: pts,
    }];
    let mut text = finish(
        o,
        &Report::chart(
            "buffer-sweep",
            &t,
            Chart {
                title: format!("Read throughput by buffer size ({})", o.run_label()),
                x: Axis::log("buffer size", Unit::Bytes),
                y: Axis::linear("throughput", Unit::Suffix("MiB/s")),
                series: &series,
            },
        ),
    )?;
    text += &format!(
        "best buffer: {} bytes ({:.0} MiB/s); for sluice: [files] buffer_size = {}\n",
        best.0,
        best.1,
        best.0.max(512)
    );
    Ok(text)
}
