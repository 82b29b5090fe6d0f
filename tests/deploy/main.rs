//! Deployment: the container image (built with podman from a local Debian
//! base, run on the bundled sample, stopped with SIGTERM: image.rs), the Helm
//! chart (lint, render, Kubernetes and CRD schemas, bad values: helm.rs), and
//! the monitoring (alert rules and their unit tests with promtool; every
//! dashboard and alert query evaluated by a real Prometheus scraping a real
//! pipeline: monitoring.rs).
//! The chart's modes and guards (serve, the `helm test` hook, GPU image,
//! persistence): chart.rs.
//! Tools: podman, runc, debootstrap, prometheus, promtool
//! (scripts/install-deps.sh); helm, kubectl and the schema validators
//! (scripts/fetch-deploy-tools.sh).

mod chart;
mod helm;
mod image;
mod monitoring;
#[path = "../util/mod.rs"]
mod util;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Run `cmd`; it must succeed. Returns its stdout.
fn ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?} failed ({}):\n{}", o.status, out(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}
