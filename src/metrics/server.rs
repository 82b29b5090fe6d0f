//! A tiny HTTP/1.1 server for `/metrics`, `/healthz` and `/readyz`, on one
//! std thread: GET only, one connection at a time, bounded request size, a
//! read timeout per connection and `Connection: close` on every answer.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::registry::Registry;

use super::Metrics;

/// The largest request head read; longer ones get `431`.
const MAX_REQUEST: usize = 8 * 1024;
/// How long one client may take to send its request (or read the answer).
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long, and how much, to read what a client still sends after the answer.
const LINGER: Duration = Duration::from_millis(250);
const LINGER_BYTES: usize = 64 * 1024;
/// How often the idle server checks whether it should stop.
const POLL: Duration = Duration::from_millis(50);

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot start the metrics server thread: {0}")]
    Thread(io::Error),
}

impl MetricsError {
    /// What to do about it.
    pub fn help(&self) -> Option<&'static str> {
        let MetricsError::Bind { source, .. } = self else { return None };
        match source.kind() {
            io::ErrorKind::AddrInUse => Some("another process listens on this port: stop it or choose another port"),
            io::ErrorKind::AddrNotAvailable => {
                Some("this machine has no such IP address: use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)")
            }
            io::ErrorKind::PermissionDenied => Some("ports below 1024 need privileges: choose a port above 1024"),
            _ => None,
        }
    }
}

/// A running metrics server; stops (and joins its thread) on [`MetricsServer::stop`] or drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listen on exactly `addr` (port 0: any free port) and serve `metrics`.
    pub fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<Self, MetricsError> {
        let listener = TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
        let bound = listener.local_addr().map_err(|source| MetricsError::Bind { addr, source })?;
        // Non-blocking accept, so the thread notices `stop` without a wake-up connection.
        listener.set_nonblocking(true).map_err(|source| MetricsError::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let registry = Metrics::registry(&metrics);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&listener, &metrics, &registry, &flag))
            .map_err(MetricsError::Thread)?;
        Ok(MetricsServer { addr: bound, stop, thread: Some(thread) })
    }

    /// The address it listens on (with the actual port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop listening and wait for the server thread (at most one request in progress).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(listener: &TcpListener, metrics: &Metrics, registry: &Registry, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = handle(stream, metrics, registry) {
                    tracing::debug!("metrics: request from {peer}: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                // Out of file descriptors and the like: wait, then go on serving.
                tracing::warn!("metrics: accept failed: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// A response: status, content type, body.
type Response = (u16, &'static str, String);

fn handle(mut stream: TcpStream, metrics: &Metrics, registry: &Registry) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let (status, content_type, body) = match read_head(&mut stream)? {
        Some(head) => respond(&head, metrics, registry),
        None => (431, "text/plain; charset=utf-8", "request too large\n".into()),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()?;
    // Closing with unread request bytes (a body, an oversized head) would reset the
    // connection and lose the answer: say we are done, then read what is left, briefly.
    stream.shutdown(Shutdown::Write)?;
    stream.set_read_timeout(Some(LINGER))?;
    let (mut chunk, mut left) = ([0u8; 4096], LINGER_BYTES);
    while let Ok(n @ 1..) = stream.read(&mut chunk) {
        left = left.saturating_sub(n);
        if left == 0 {
            break;
        }
    }
    Ok(())
}

/// The request head (up to the blank line), or `None` when it is too large.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            break;
        }
        if buf.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

/// `/metrics` of `metrics` as OpenMetrics (what Prometheus asks for) or the 0.0.4 text format: (content type, body).
pub fn encode(metrics: &Arc<Metrics>, openmetrics: bool) -> Result<(&'static str, String), ()> {
    let registry = Metrics::registry(metrics);
    let mut body = String::new();
    if openmetrics {
        text::encode(&mut body, &registry).map(|()| (OPENMETRICS, body)).map_err(|_| ())
    } else {
        prometheus_text::encode(&mut body, &registry).map(|()| (prometheus_text::CONTENT_TYPE, body)).map_err(|_| ())
    }
}

fn respond(head: &str, metrics: &Metrics, registry: &Registry) -> Response {
    const PLAIN: &str = "text/plain; charset=utf-8";
    let mut lines = head.lines();
    let mut parts = lines.next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return (400, PLAIN, "bad request\n".into());
    };
    if !version.starts_with("HTTP/1.") {
        return (400, PLAIN, "bad request\n".into());
    }
    if method != "GET" {
        return (405, PLAIN, "only GET\n".into());
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    match path {
        "/metrics" => {
            // Prometheus asks for OpenMetrics; anything else (curl, a browser) gets the 0.0.4 text format.
            let openmetrics = lines.any(|l| {
                l.split_once(':')
                    .is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text"))
            });
            let mut body = String::new();
            let (ok, content_type) = if openmetrics {
                (text::encode(&mut body, registry), OPENMETRICS)
            } else {
                (prometheus_text::encode(&mut body, registry), prometheus_text::CONTENT_TYPE)
            };
            match ok {
                Ok(()) => (200, content_type, body),
                Err(_) => (500, PLAIN, "cannot encode metrics\n".into()),
            }
        }
        "/healthz" => (200, PLAIN, "ok\n".into()),
        "/readyz" if target.split_once('?').is_some_and(|(_, q)| q.split('&').any(|k| k == "verbose" || k.starts_with("verbose="))) => {
            match metrics.readiness_verbose() {
                Ok(text) => (200, PLAIN, text),
                Err(text) => (503, PLAIN, text),
            }
        }
        "/readyz" => match metrics.readiness() {
            Ok(()) => (200, PLAIN, "ready\n".into()),
            Err(why) => (503, PLAIN, format!("{why}\n")),
        },
        _ => (404, PLAIN, "not found: try /metrics, /healthz or /readyz\n".into()),
    }
}
