//! Process CPU time, peak memory and GPU use, for bench reports (Linux).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

/// Linux reports process times in USER_HZ ticks, 100 per second on every architecture we build for.
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds of this process.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// Peak resident memory of this process (VmHWM), MiB.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()))
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[derive(Debug, Clone, Serialize)]
pub struct CpuReport {
    /// Mean over the run, % of one core (200% = two cores busy).
    pub mean_percent: f64,
    pub cores: usize,
}

/// Measures CPU use between calls.
pub struct CpuClock {
    start: (Instant, f64),
    last: (Instant, f64),
}

impl CpuClock {
    pub fn start() -> Self {
        let now = (Instant::now(), cpu_seconds().unwrap_or(0.0));
        CpuClock { start: now, last: now }
    }

    pub fn percent_since_last(&mut self) -> f64 {
        let now = (Instant::now(), cpu_seconds().unwrap_or(0.0));
        let p = (now.1 - self.last.1) / (now.0 - self.last.0).as_secs_f64().max(1e-6) * 100.0;
        self.last = now;
        p
    }

    pub fn report(&self, _wall: f64) -> CpuReport {
        let now = (Instant::now(), cpu_seconds().unwrap_or(0.0));
        let mean_percent = (now.1 - self.start.1) / (now.0 - self.start.0).as_secs_f64().max(1e-6) * 100.0;
        CpuReport { mean_percent, cores: crate::stages::infer::cores() }
    }
}

/// GPU utilisation and memory over the run, read from `nvidia-smi` (present wherever the NVIDIA driver is).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuReport {
    /// Why there are no figures, when there are none.
    pub unavailable: Option<String>,
    pub mean_utilization_percent: Option<f64>,
    pub max_utilization_percent: Option<f64>,
    pub max_memory_mib: Option<f64>,
    pub samples: usize,
}

impl GpuReport {
    pub fn summary(&self) -> String {
        match (&self.unavailable, self.mean_utilization_percent) {
            (Some(why), _) => format!("none ({why})"),
            (None, Some(u)) => format!(
                "utilisation {u:.0}% mean, {:.0}% max; memory {:.0} MiB max ({} samples)",
                self.max_utilization_percent.unwrap_or(0.0),
                self.max_memory_mib.unwrap_or(0.0),
                self.samples
            ),
            (None, None) => "no samples".into(),
        }
    }
}

/// Samples `nvidia-smi` every 500 ms in the background.
pub struct GpuSampler {
    child: Option<Child>,
    samples: Arc<Mutex<Vec<(f64, f64)>>>,
    why: Option<String>,
}

impl GpuSampler {
    pub fn start() -> Self {
        let spawned = Command::new("nvidia-smi")
            .args(["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "500"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let samples = Arc::new(Mutex::new(Vec::new()));
        match spawned {
            Ok(mut child) => {
                let out = child.stdout.take().expect("piped");
                let s = samples.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(out).lines().map_while(Result::ok) {
                        let v: Vec<f64> = line.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                        if let [u, m, ..] = v[..] {
                            s.lock().unwrap_or_else(|e| e.into_inner()).push((u, m));
                        }
                    }
                });
                GpuSampler { child: Some(child), samples, why: None }
            }
            Err(_) => GpuSampler { child: None, samples, why: Some("no NVIDIA GPU: nvidia-smi not found".into()) },
        }
    }

    pub fn finish(mut self) -> GpuReport {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_empty() {
            return GpuReport {
                unavailable: Some(self.why.clone().unwrap_or_else(|| "nvidia-smi reported no GPU".into())),
                ..Default::default()
            };
        }
        let n = s.len() as f64;
        GpuReport {
            unavailable: None,
            mean_utilization_percent: Some(s.iter().map(|x| x.0).sum::<f64>() / n),
            max_utilization_percent: s.iter().map(|x| x.0).reduce(f64::max),
            max_memory_mib: s.iter().map(|x| x.1).reduce(f64::max),
            samples: s.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_time_and_memory() {
        let t0 = cpu_seconds().expect("/proc/self/stat");
        let mut x = 0u64;
        let until = Instant::now() + std::time::Duration::from_millis(150);
        while Instant::now() < until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds().unwrap() > t0, "busy loop used CPU");
        assert!(peak_rss_mib() > 1.0);
    }
}
