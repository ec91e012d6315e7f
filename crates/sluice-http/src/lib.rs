//! HTTP/1.x wire format for sluice.
//!
//! This crate owns the bytes: turning a buffer into a validated [`RequestHead`], the
//! `Range` and conditional-request rules of RFC 9110, and the text of response heads.
//! It must not do I/O, allocate per header, or know about files or sockets: the
//! server feeds it bytes, the handlers ask it questions, and both stay testable with
//! plain byte strings.
//!
//! Parsing is delegated to `httparse` (fast, fuzzed, zero-copy); what is ours is the
//! policy on top of it: size limits, request-smuggling checks, and which framing a
//! request's body has.

pub mod conditional;
pub mod date;
pub mod encoding;
pub mod proxy;
pub mod range;
pub mod request;
pub mod response;

pub use request::{parse_head, BodyFraming, Limits, Method, ParseError, Parsed, RequestHead};
pub use response::{reason, Status};
