//! `sluice bench --ramp c:START:STEP:MAX | rate:START:STEP:MAX`: the same run stepped
//! up (connections or open-loop rate) until availability falls below a threshold.

use crate::options::Options;
use crate::report::Summary;
use crate::workload::Workload;

/// What is stepped, and over which values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ramp {
    pub rate: bool,
    pub start: f64,
    pub step: f64,
    pub max: f64,
}

impl Ramp {
    pub fn parse(spec: &str) -> Result<Ramp, String> {
        let bad = || format!("--ramp {spec:?}: expected c:START:STEP:MAX or rate:START:STEP:MAX");
        let parts: Vec<&str> = spec.split(':').collect();
        let [what, start, step, max] = parts.as_slice() else {
            return Err(bad());
        };
        let num = |s: &str| s.parse::<f64>().map_err(|_| bad());
        let r = Ramp {
            rate: match *what {
                "c" => false,
                "rate" => true,
                _ => return Err(bad()),
            },
            start: num(start)?,
            step: num(step)?,
            max: num(max)?,
        };
        if !(r.start > 0.0 && r.step > 0.0 && r.max >= r.start) {
            return Err(bad());
        }
        Ok(r)
    }

    fn name(&self) -> &'static str {
        if self.rate {
            "rate"
        } else {
            "c"
        }
    }
}

/// One step's result.
pub struct Step {
    pub x: f64,
    pub summary: Summary,
}

/// Run the steps; stop after the first whose availability is below `stop`. With
/// `print`, a table line per step as it ends.
pub fn run(
    url: &str,
    opts: &Options,
    workload: &Workload,
    ramp: Ramp,
    stop: f64,
    print: bool,
) -> Result<Vec<Step>, String> {
    let what = ramp.name();
    if print {
        println!(
            "{:>10}  {:>12}  {:>10}  {:>10}  {:>12}",
            what, "req/s", "p50", "p99", "availability"
        );
    }
    let mut steps = Vec::new();
    let mut x = ramp.start;
    while x <= ramp.max {
        let mut o = opts.clone();
        o.progress = false;
        if ramp.rate {
            o.rate = Some(x);
        } else {
            o.connections = x as usize;
        }
        let r = crate::engine::run(&o, workload).map_err(|e| format!("load run failed: {e}"))?;
        let s = Summary::new(url, o.threads.min(o.connections), o.connections, &r);
        if print {
            println!(
                "{:>10}  {:>12.1}  {:>10}  {:>10}  {:>11.2}%",
                x,
                s.requests_per_s,
                crate::report::us(s.latency_us.p50),
                crate::report::us(s.latency_us.p99),
                s.availability * 100.0
            );
        }
        let low = s.availability < stop;
        steps.push(Step { x, summary: s });
        if low {
            if print {
                println!(
                    "availability fell below {:.0}% at {what} = {x}",
                    stop * 100.0
                );
            }
            break;
        }
        x += ramp.step;
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_specs() {
        assert_eq!(
            Ramp::parse("c:10:10:100"),
            Ok(Ramp {
                rate: false,
                start: 10.0,
                step: 10.0,
                max: 100.0
            })
        );
        assert!(Ramp::parse("rate:100:50:1000").unwrap().rate);
        for bad in [
            "c:10:10", "x:1:1:1", "c:0:1:5", "c:5:0:9", "c:9:1:5", "c:a:1:5",
        ] {
            assert!(Ramp::parse(bad).is_err(), "{bad}");
        }
    }
}
