use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn backoff_doubles_up_to_the_cap() {
    let mut b = Backoff::new(500 * MS, 30_000 * MS, 7);
    let mut bases = Vec::new();
    for _ in 0..10 {
        bases.push(b.base().as_millis());
        b.next_delay();
    }
    assert_eq!(bases, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]);
    // Far past the point where 2^n overflows: still the cap.
    for _ in 0..100 {
        b.next_delay();
    }
    assert_eq!(b.base(), 30_000 * MS);
}

#[test]
fn jitter_stays_within_a_quarter_below_the_base() {
    let mut b = Backoff::new(400 * MS, 1600 * MS, 12345);
    let mut seen = Vec::new();
    for _ in 0..2000 {
        let base = b.base();
        let d = b.next_delay();
        assert!(d <= base && d > base.mul_f64(0.75) - MS, "{d:?} vs base {base:?}");
        seen.push(d.as_secs_f64() / base.as_secs_f64());
        if b.base() == 1600 * MS {
            b.reset();
        }
    }
    // Jittered, not constant: the ratios spread over most of (0.75, 1].
    let (lo, hi) = seen.iter().fold((1.0f64, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
    assert!(lo < 0.78 && hi > 0.97, "ratios {lo}..{hi}");
}

#[test]
fn different_seeds_jitter_differently() {
    let mut a = Backoff::new(1000 * MS, 1000 * MS, 1);
    let mut b = Backoff::new(1000 * MS, 1000 * MS, 2);
    let (da, db): (Vec<_>, Vec<_>) = (0..8).map(|_| (a.next_delay(), b.next_delay())).unzip();
    assert_ne!(da, db);
}

#[test]
fn backoff_resets_after_a_healthy_minute_only() {
    let mut b = Backoff::new(500 * MS, 30_000 * MS, 3);
    for _ in 0..4 {
        b.next_delay();
    }
    assert_eq!(b.base(), 8000 * MS);
    b.lost_after(Duration::from_secs(59));
    assert_eq!(b.base(), 8000 * MS, "a short connection keeps the backoff");
    b.lost_after(HEALTHY);
    assert_eq!(b.base(), 500 * MS);
    b.next_delay();
    b.reset();
    assert_eq!(b.base(), 500 * MS);
}

#[test]
fn cap_below_initial_is_the_initial() {
    let b = Backoff::new(500 * MS, 100 * MS, 1);
    assert_eq!(b.base(), 500 * MS);
}

/// Drive a [`Retry`] against a camera whose port refuses until `back` and
/// then answers (and whose stream opens from then on): when the stream
/// reopens, and the (probes, attempts) made within the first `count_for`.
fn simulate(r: &mut Retry, back: Duration, count_for: Duration) -> (Duration, u32, u32) {
    r.start();
    let (mut t, mut probes, mut opens) = (Duration::ZERO, 0, 0);
    loop {
        match r.next(t) {
            Step::Wait(d) => {
                assert!(!d.is_zero());
                t += d;
            }
            Step::Probe => {
                probes += u32::from(t < count_for);
                r.probed(t, t >= back);
            }
            Step::Open => {
                opens += u32::from(t < count_for);
                if t >= back {
                    return (t, probes, opens);
                }
                r.open_failed(t);
            }
        }
        assert!(t < Duration::from_secs(24 * 3600), "never reopened");
    }
}

fn retry(probe_ms: u64) -> Retry {
    Retry::new(Backoff::new(500 * MS, 30_000 * MS, 9), Some(Duration::from_millis(probe_ms)), 90_000 * MS)
}

#[test]
fn a_camera_back_within_the_window_is_reopened_within_one_probe_interval() {
    for secs in [0.3, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 45.0, 60.0, 89.0] {
        let back = Duration::from_secs_f64(secs);
        let (at, ..) = simulate(&mut retry(250), back, Duration::ZERO);
        assert!(at >= back && at - back <= 250 * MS, "camera back at {back:?}, reopened at {at:?}");
    }
    // Without probes: only the backoff (a 5 s outage waits for the attempt at ~7.5 s).
    let mut r = Retry::new(Backoff::new(500 * MS, 30_000 * MS, 9), None, 90_000 * MS);
    let (at, probes, _) = simulate(&mut r, 5000 * MS, Duration::from_secs(3600));
    assert!(at - 5000 * MS > 500 * MS && probes == 0, "{at:?}, {probes} probes");
}

#[test]
fn a_camera_that_stays_down_is_not_hammered() {
    let minute = Duration::from_secs(60);
    // Down for an hour: within the first minute one probe per interval and
    // the backoff's few attempts; after the window, no probes at all.
    let (_, probes, opens) = simulate(&mut retry(250), Duration::from_secs(3600), minute);
    assert!((235..=240).contains(&probes), "{probes} probes in the first minute");
    assert!(opens <= 8, "{opens} attempts in the first minute");
    let (_, probes_hour, opens_hour) = simulate(&mut retry(250), Duration::from_secs(3600), Duration::from_secs(3600));
    assert!(probes_hour <= 90 * 4 + 1, "{probes_hour} probes in an hour: probing ends with the window");
    // Attempts at most every 30 s (the cap, jittered down by a quarter) once the backoff is there.
    assert!(opens_hour <= 8 + 3600 / 22, "{opens_hour} attempts in an hour");
    // A camera back only after the window: the backoff's next attempt (at most the cap away).
    let back = Duration::from_secs(100);
    let (at, ..) = simulate(&mut retry(250), back, Duration::ZERO);
    assert!(at >= back && at - back <= 30_000 * MS, "{at:?}");
}

#[test]
fn a_port_that_keeps_answering_keeps_attempts_on_the_backoff() {
    // A hung camera: its port accepts, its stream never opens.
    let mut r = retry(250);
    r.start();
    let (mut t, mut opens) = (Duration::ZERO, 0);
    while t < Duration::from_secs(60) {
        match r.next(t) {
            Step::Wait(d) => t += d,
            Step::Probe => r.probed(t, true),
            Step::Open => {
                opens += 1;
                // Each attempt waits out a 1 s connect timeout.
                t += 1000 * MS;
                r.open_failed(t);
            }
        }
    }
    assert!(opens <= 9, "{opens} attempts in a minute on a hung camera");
}

#[test]
fn probe_address_takes_host_and_port_from_the_url() {
    let a = |u: &str| probe_address(u);
    assert_eq!(a("rtsp://127.0.0.1:18554/cam"), Some(("127.0.0.1".into(), 18554)));
    assert_eq!(a("rtsp://admin:p@ss:w0rd@cam.local/stream1"), Some(("cam.local".into(), 554)));
    assert_eq!(a("RTSPS://[fe80::1]:8322/x?y=1"), Some(("fe80::1".into(), 8322)));
    assert_eq!(a("rtsps://[::1]/x"), Some(("::1".into(), 322)));
    assert_eq!(a("rtsp://cam:/x"), Some(("cam".into(), 554)));
    assert_eq!(a("rtsp://cam:99999/x"), None);
    assert_eq!(a("http://cam/x"), None);
    assert_eq!(a("rtsp:///x"), None);
}

#[test]
fn clock_follows_the_camera_and_never_goes_back() {
    let t0 = Instant::now();
    let mut c = Clock::new(t0);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // 90 kHz pts from an arbitrary start, frames every 66.7 ms.
    assert_eq!(c.stamp(Some(900_000), (1, 90_000), at(10)), 10);
    assert_eq!(c.stamp(Some(906_000), (1, 90_000), at(70)), 76);
    // Missing pts: the wall clock.
    assert_eq!(c.stamp(None, (1, 90_000), at(150)), 150);
    // A pts going back within the connection: still increasing.
    assert_eq!(c.stamp(Some(903_000), (1, 90_000), at(160)), 151);
    // A new connection starting at pts 0, 5 s later: anchored at the wall clock.
    c.new_connection();
    assert_eq!(c.stamp(Some(0), (1, 90_000), at(5160)), 5160);
    assert_eq!(c.stamp(Some(9000), (1, 90_000), at(5250)), 5260);
    // A camera clock jump (RTCP resync): re-anchored at the wall clock.
    assert_eq!(c.stamp(Some(9000 + 90_000 * 3600), (1, 90_000), at(5330)), 5330);
    // A zero time base does not divide by zero.
    assert_eq!(c.stamp(Some(5), (1, 0), at(5400)), 5400);
}
