//! `sluice bench`: a load generator as fast as wrk, and the seeds' experiments.
//!
//! Layers, bottom up (each depends only on those above it in this list):
//! - `options`, `outcome`: what a run does and what it counts (types);
//! - [`workload`]: what to request (one URL, URL lists random or in order, Zipf);
//! - `socket`, `alarm`: a client socket from one of several source addresses; the
//!   open loop's timer;
//! - [`engine`]: the event-driven client (closed loop, open loop at a fixed rate with
//!   latency from the intended send time, pipelining, keep-alive on/off, slow
//!   readers, several source addresses, redirect following as one transaction);
//! - [`report`]: the human summary, the JSON schema, tables and CSV;
//! - [`fanout`]: one run split over child processes (each with its own descriptor
//!   limit), their counts and histograms merged; [`ramp`]: a run stepped up until
//!   availability falls;
//! - [`plot`]: line charts in human units;
//! - [`attack`]: the conditioning experiments' attackers (silent, half heads,
//!   slowloris, held keep-alives), several processes past one's descriptor limit;
//! - [`stall`]: a watch for the machine itself stopping (a capped virtual machine),
//!   printed beside latencies;
//! - [`experiments`]: the seeds' measurements, one file each, registered in one table.
//!
//! It works against any HTTP/1.1 server; nothing in it knows about sluice.

mod alarm;
pub mod attack;
pub mod engine;
pub mod experiments;
pub mod fanout;
mod options;
mod outcome;
pub mod plot;
pub mod process;
pub mod ramp;
pub mod report;
mod socket;
pub mod stall;
pub mod workload;

pub use engine::run;
pub use options::Options;
pub use outcome::{new_histogram, Counts, RunResult};
pub use report::Summary;
pub use workload::{Pick, Workload};
