//! The process's own CPU time and resident memory for `/metrics`, under the
//! names Prometheus client libraries use (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`), read from `/proc/self` at each scrape.
//! Absent where `/proc` is not there.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::family;

/// Clock ticks per second of `/proc/self/stat`'s times: 100 on every Linux
/// architecture we build for (USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_SIZE: u64 = 4096;
const NO_LABELS: [(&str, &str); 0] = [];

/// (user + system CPU seconds, resident bytes), if `/proc/self` can be read.
pub fn read() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    parse(&stat, &statm)
}

/// From the text of `/proc/self/stat` and `/proc/self/statm`.
pub fn parse(stat: &str, statm: &str) -> Option<(f64, u64)> {
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14 and stime 15 (1-based).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(((utime + stime) as f64 / TICKS_PER_SECOND, resident_pages * PAGE_SIZE))
}

pub fn encode(enc: &mut DescriptorEncoder, reading: Option<(f64, u64)>) -> fmt::Result {
    let Some((cpu, rss)) = reading else { return Ok(()) };
    family(
        enc,
        "process_cpu",
        "User and system CPU time the process spent.",
        Some(&Unit::Seconds),
        MetricType::Counter,
        [(NO_LABELS, ConstCounter::new(cpu))],
    )?;
    family(
        enc,
        "process_resident_memory",
        "Resident memory of the process.",
        Some(&Unit::Bytes),
        MetricType::Gauge,
        [(NO_LABELS, ConstGauge::new(rss as f64))],
    )
}
