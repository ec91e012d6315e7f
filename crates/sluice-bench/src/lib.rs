//! `sluice bench`: a load generator as fast as wrk, and the seeds' experiments.
//!
//! - [`engine`]: the event-driven client (closed loop, open loop at a fixed rate with
//!   latency from the intended send time, pipelining, keep-alive on/off, slow
//!   readers, several source addresses, redirect following as one transaction);
//! - [`workload`]: what to request (one URL, URL lists random or in order, Zipf);
//! - [`report`]: the human summary, the JSON schema, tables and CSV;
//! - [`experiments`]: the seeds' measurements as one command each, with SVG plots;
//! - [`plot`]: line charts;
//! - [`attack`]: the conditioning experiments' attackers (silent, half heads,
//!   slowloris, held keep-alives), several processes past one's descriptor limit.
//!
//! It works against any HTTP/1.1 server; nothing in it knows about sluice.

pub mod attack;
pub mod engine;
pub mod experiments;
pub mod plot;
pub mod report;
pub mod workload;

pub use engine::{run, Options, RunResult};
pub use report::Summary;
pub use workload::{Pick, Workload};
