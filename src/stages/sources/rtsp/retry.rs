//! When to try a lost camera again: the exponential backoff with jitter
//! ([`Backoff`]), the schedule of attempts and the cheap probes of the camera's
//! port between them ([`Retry`], [`Step`]), and the address a probe knocks at.

use std::time::Duration;

/// A connection that delivered frames this long resets the backoff.
pub const HEALTHY: Duration = Duration::from_secs(60);

/// Waits between reconnection attempts: `initial` doubling after each failure
/// up to `max`, each jittered down by up to a quarter so that cameras lost
/// together do not all come back at the same instant.
#[derive(Debug, Clone)]
pub struct Backoff {
    pub(super) initial: Duration,
    pub(super) max: Duration,
    pub(super) failures: u32,
    pub(super) rng: u64,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Self {
        Backoff { initial, max: max.max(initial), failures: 0, rng: seed | 1 }
    }

    /// The wait before the next attempt without jitter: initial × 2^failures, at most `max`.
    pub fn base(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.initial.checked_mul(factor).unwrap_or(self.max).min(self.max)
    }

    /// The wait before the next attempt, in (¾ base, base]; the one after doubles.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base();
        self.failures = self.failures.saturating_add(1);
        base.mul_f64(1.0 - 0.25 * self.unit())
    }

    /// Start again from `initial`.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The stream was lost after being up for `up`: a healthy connection resets the backoff.
    pub fn lost_after(&mut self, up: Duration) {
        if up >= HEALTHY {
            self.reset();
        }
    }

    /// Uniform in [0, 1) (xorshift64*: jitter needs no more).
    pub(super) fn unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a source whose stream is down does next (see [`Retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due for this long.
    Wait(Duration),
    /// Knock on the camera's port (a TCP connect), then report with [`Retry::probed`].
    Probe,
    /// A full reconnection attempt, then [`Retry::open_failed`] if it fails.
    Open,
}

/// When to retry a lost stream, in time since the loss: full reconnection
/// attempts after the backoff's waits (doubling, so a camera that stays down
/// is not hammered), and between them, for the first `window` of the outage,
/// a cheap probe of the camera's port every `probe` interval. A probe that
/// finds the port answering after it did not (the camera is back) brings the
/// next attempt forward to now and starts the backoff again; a port that
/// keeps answering (a hung camera) brings nothing forward, so attempts stay
/// on the backoff's schedule.
#[derive(Debug, Clone)]
pub struct Retry {
    pub(super) backoff: Backoff,
    /// `None`: no probing (only the backoff's attempts).
    pub(super) probe: Option<Duration>,
    pub(super) window: Duration,
    pub(super) next_open: Duration,
    pub(super) next_probe: Duration,
    /// The last probe found the port answering.
    pub(super) answering: bool,
}

impl Retry {
    pub fn new(backoff: Backoff, probe: Option<Duration>, window: Duration) -> Self {
        let probe = probe.filter(|p| !p.is_zero());
        Retry { backoff, probe, window, next_open: Duration::ZERO, next_probe: Duration::ZERO, answering: false }
    }

    /// A new outage: the first attempt after the backoff's wait, the first probe after one interval.
    pub fn start(&mut self) {
        self.next_open = self.backoff.next_delay();
        self.next_probe = self.probe.unwrap_or(Duration::ZERO);
        self.answering = false;
    }

    /// What to do at `t` since the loss.
    pub fn next(&self, t: Duration) -> Step {
        if t >= self.next_open {
            return Step::Open;
        }
        let due = match self.probe {
            Some(_) if self.next_probe < self.window => self.next_open.min(self.next_probe),
            _ => self.next_open,
        };
        if t >= due { Step::Probe } else { Step::Wait(due - t) }
    }

    /// The probe at `t` found the port answering or not.
    pub fn probed(&mut self, t: Duration, answering: bool) {
        self.next_probe = t + self.probe.unwrap_or(Duration::ZERO);
        if answering && !self.answering {
            self.backoff.reset();
            self.next_open = t;
        }
        self.answering = answering;
    }

    /// The attempt at `t` failed: the next one after the backoff's wait.
    pub fn open_failed(&mut self, t: Duration) {
        self.next_open = t + self.backoff.next_delay();
    }

    /// The stream was lost after being up for `up` (see [`Backoff::lost_after`]).
    pub fn lost_after(&mut self, up: Duration) {
        self.backoff.lost_after(up);
    }
}

/// `host:port` of an `rtsp://` or `rtsps://` URL (default ports 554 and 322),
/// credentials left out; `None` for anything else.
pub fn probe_address(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "rtsp" => 554,
        "rtsps" => 322,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None | Some("") => default,
        Some(p) => p.parse().ok()?,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Does anything accept a TCP connection at `addr` within `timeout`?
pub(super) fn port_answers(addr: &(String, u16), timeout: Duration) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = (addr.0.as_str(), addr.1).to_socket_addrs() else { return false };
    addrs.into_iter().any(|a| std::net::TcpStream::connect_timeout(&a, timeout).is_ok())
}
