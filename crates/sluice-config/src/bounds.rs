//! Numeric bounds of settings, as data: (min, max). The parser checks them and the
//! docs quote them, so the two cannot drift apart. Also the one bound between two
//! settings that both `[http]` and a site check (`limit_rate_problem`).

pub const WORKERS: (u64, u64) = (0, 256);
/// 0: one serving process per worker, at most the maximum.
pub const PROCESSES: (u64, u64) = (0, 64);
pub const LISTEN_SOCKETS: (u64, u64) = (1, 64);
/// Scheduling priority (nice): -20 most favoured, 19 least.
pub const PRIORITY: (i64, i64) = (-20, 19);
/// The scheduler time slice asked for each serving thread, in microseconds (0: the
/// kernel's own); the kernel clamps a custom slice to 0.1–100 ms.
pub const SCHED_SLICE_US: (u64, u64) = (100, 100_000);
pub const BUFFER_SIZE: (u64, u64) = (512, 16 << 20);
pub const KEEPALIVE_REQUESTS: (u64, u64) = (1, 1 << 32);
pub const MAX_REQUEST_LINE: (u64, u64) = (256, 1 << 20);
pub const MAX_HEAD: (u64, u64) = (1024, 1 << 20);
pub const MAX_HEADERS: (u64, u64) = (8, 128);
pub const MAX_RANGES: (u64, u64) = (1, 1024);
pub const MAX_BODY_DISCARD: (u64, u64) = (0, 1 << 30);
/// Bytes per second per connection (0: no limit); the kernel takes 32 bits.
pub const LIMIT_RATE: (u64, u64) = (0, 4_000_000_000);
/// Body bytes sent at full speed before `limit_rate` applies (0: none); up to 1 TiB.
pub const LIMIT_RATE_AFTER: (u64, u64) = (0, 1 << 40);
pub const CACHE_ENTRIES: (u64, u64) = (0, 1 << 22);
pub const DISK_THREADS: (u64, u64) = (0, 256);
pub const LISTING_THREADS: (u64, u64) = (1, 64);
pub const SMALL_FILE_MAX: (u64, u64) = (0, 1 << 20);
pub const ANSWER_CACHE: (u64, u64) = (0, 1 << 16);
pub const UNSENT_MAX: (u64, u64) = (0, 1 << 30);
pub const UNSENT_TOTAL: (u64, u64) = (0, 1 << 50);

/// Why a `limit_rate` cannot be used beside `condition.min_send_rate`, if it can't.
/// Twice, not just above: the pacing counts headers and retransmissions too, and a
/// download paced at the edge would be cut as a slow reader.
pub(crate) fn limit_rate_problem(rate: u64, min_send_rate: u64) -> Option<String> {
    (rate != 0 && rate < 2 * min_send_rate).then(|| {
        format!(
            "{rate} bytes/s is less than twice condition.min_send_rate ({min_send_rate}): downloads would be cut as slow readers"
        )
    })
}
