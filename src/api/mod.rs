//! The service API of `infer-stream serve`: one listener (HTTP/1.1 and HTTP/2,
//! plain or TLS) for the REST routes, live results (server-sent events),
//! health, metrics, the OpenAPI document, and gRPC. It owns the HTTP side only
//! (routing, authentication and roles, limits, TLS); it reaches the pipeline
//! through the runtime's narrow [`Control`] handle, never a stage.

pub mod auth;
pub mod clips;
pub mod grpc;
pub mod health;
pub mod infer;
pub mod live;
pub mod results;
pub mod streams;
pub mod tls;
pub mod ui;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::config::api::{ApiConfig, DEFAULT_MAX_STREAMS};
use crate::config::{Diagnostic, Diagnostics, PipelineConfig};
use crate::metrics::Metrics;
pub use crate::runtime::control::{Control, ControlError};
pub use crate::runtime::results::{Delivery, Published, ResultKind, ResultsHub, Subscription};
pub use auth::{Auth, Role};

/// Default largest request body.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;
/// Largest request head (HTTP/1.1 buffer, HTTP/2 header list).
pub const MAX_HEADERS: usize = 16 * 1024;
/// Each connection's kernel send buffer (Linux counts it double), fixed
/// rather than autotuned up to 4 MiB: a client that stops reading holds at
/// most this much of its live results in the server's socket before its
/// subscription buffer drops the oldest and tells it how many.
pub const SOCKET_SEND_BUF: usize = 64 * 1024;

/// What every handler shares: the control handle and what the API needs besides.
#[derive(Clone)]
pub struct ApiState {
    /// The narrow handle to the running pipeline.
    pub control: Arc<Control>,
    /// The counters `/metrics` and `/readyz` read.
    pub metrics: Arc<Metrics>,
    pub auth: Arc<Auth>,
    /// How long `DELETE /v1/streams/{id}` waits for the stream's outputs to close.
    pub drain_wait: Duration,
}

impl ApiState {
    pub fn results(&self) -> &Arc<ResultsHub> {
        self.control.results()
    }
}

/// The API's settings from `[pipeline] api` (and `--listen`), checked before anything runs.
pub struct ApiSettings {
    pub listen: SocketAddr,
    pub auth: Arc<Auth>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// With client certificates (mutual TLS).
    pub mtls: bool,
    pub max_body: usize,
    pub results_buffer: usize,
    /// The most added streams listed at once (`api.max_streams`).
    pub max_streams: usize,
    /// The most live pictures a second a viewer may ask for (`api.live_fps`).
    pub live_fps: f64,
}

impl ApiSettings {
    /// Read `[pipeline] api`; `listen` (the command line's) wins over the file's address.
    pub fn from_config(cfg: &PipelineConfig, listen: Option<SocketAddr>) -> Result<Self, Diagnostics> {
        let default = ApiConfig::default();
        let api = cfg.settings.api.as_ref().unwrap_or(&default);
        let from_flag = listen.is_some();
        let listen = match listen {
            Some(a) => a,
            None => cfg.api_listen().map_err(|d| Diagnostics(vec![d]))?,
        };
        let auth = Auth::from_config(cfg, api)?;
        let tls = match &api.tls {
            Some(t) => Some(tls::server_config(cfg, t).map_err(|d| Diagnostics(vec![d]))?),
            None => None,
        };
        if !listen.ip().is_loopback() && auth.is_open() {
            let help = "give `[pipeline] api.tokens` (or `tokens_file`), or listen on 127.0.0.1";
            // Point at what chose the address: the command line, or the file's `api.listen`.
            let d = match (from_flag, &api.listen) {
                (true, _) => Diagnostic::whole_file(
                    &cfg.file,
                    format!("`--listen {listen}`: the API could be reached from other machines, and this file gives no tokens"),
                )
                .with_help(format!("{help} (`--listen 127.0.0.1:{}`)", listen.port())),
                (false, l) => cfg
                    .diag(
                        l.as_ref().map_or(0..0, |l| l.span()),
                        format!("the API on {listen} could be reached from other machines without tokens"),
                    )
                    .with_help(help),
            };
            return Err(Diagnostics(vec![d]));
        }
        let max_streams = match &api.max_streams {
            Some(m) if *m.get_ref() == 0 => {
                return Err(Diagnostics(vec![
                    cfg.diag(m.span(), "`api.max_streams` must be at least 1")
                        .with_help(format!("the most streams added at run time at once (default {DEFAULT_MAX_STREAMS})")),
                ]));
            }
            Some(m) => *m.get_ref(),
            None => DEFAULT_MAX_STREAMS,
        };
        let live_fps = match &api.live_fps {
            Some(f) if !(f.get_ref().is_finite() && *f.get_ref() > 0.0 && *f.get_ref() <= 60.0) => {
                return Err(Diagnostics(vec![
                    cfg.diag(f.span(), format!("`api.live_fps` must be above 0 and at most 60, got {}", f.get_ref())).with_help(format!(
                        "the most live pictures a second a viewer may ask for (default {})",
                        crate::runtime::live::DEFAULT_MAX_FPS
                    )),
                ]));
            }
            Some(f) => *f.get_ref(),
            None => crate::runtime::live::DEFAULT_MAX_FPS,
        };
        Ok(ApiSettings {
            live_fps,
            max_streams,
            listen,
            auth: Arc::new(auth),
            mtls: api.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            tls,
            max_body: api.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY).max(1024),
            results_buffer: api.results_buffer.unwrap_or(crate::runtime::results::DEFAULT_BUFFER).max(1),
        })
    }
}

/// A JSON error: `{"error": "...", "status": N}`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = crate::config::mask_credentials(&message.into()).into_owned();
    (status, axum::Json(serde_json::json!({ "error": message, "status": status.as_u16() }))).into_response()
}

/// gRPC services on the same listener (tonic's [`tonic::service::Routes`]).
fn grpc_routes(state: &ApiState) -> Option<Router> {
    Some(grpc::routes(state))
}

/// Every route set, merged, behind the auth layer and the body limit.
pub fn router(state: ApiState, max_body: usize) -> Router {
    let http = Router::new()
        .merge(streams::routes())
        .merge(results::routes())
        .merge(health::routes())
        .merge(clips::routes())
        // Request/response inference routes are merged here.
        .merge(infer::routes())
        .merge(live::routes())
        .merge(ui::routes())
        .with_state(state.clone());
    let mut app = http;
    if let Some(grpc) = grpc_routes(&state) {
        app = app.merge(grpc);
    }
    app.fallback(|| async { error(StatusCode::NOT_FOUND, "no such route: see GET /v1/openapi.json") })
        .method_not_allowed_fallback(|req: axum::extract::Request| async move {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{} is not a method of {}: see GET /v1/openapi.json", req.method(), req.uri().path()),
            )
        })
        .layer(axum::middleware::from_fn_with_state(state, auth::require))
        .layer(axum::middleware::from_fn(ui::headers))
        .layer(DefaultBodyLimit::max(max_body))
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the API: {0}")]
    Start(std::io::Error),
}

impl ApiError {
    /// What to do about it.
    pub fn help(&self) -> Option<&'static str> {
        let ApiError::Bind { source, .. } = self else { return None };
        match source.kind() {
            std::io::ErrorKind::AddrInUse => Some("another process listens on this port: stop it or choose another port"),
            std::io::ErrorKind::AddrNotAvailable => Some("this machine has no such IP address: use 127.0.0.1 or 0.0.0.0"),
            std::io::ErrorKind::PermissionDenied => Some("ports below 1024 need privileges: choose a port above 1024"),
            _ => None,
        }
    }
}

/// Take the API's port now (before models load), so that a port in use fails at once.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ApiError> {
    let l = TcpListener::bind(addr).map_err(|source| ApiError::Bind { addr, source })?;
    l.set_nonblocking(true).map_err(|source| ApiError::Bind { addr, source })?;
    // Accepted connections inherit it.
    // A send buffer set so is no longer grown by the kernel's autotuning (up to 4 MiB by default).
    socket2::SockRef::from(&l).set_send_buffer_size(SOCKET_SEND_BUF).map_err(|source| ApiError::Bind { addr, source })?;
    Ok(l)
}

/// A running API server; [`Server::stop`] ends it.
pub struct Server {
    addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serve `state` on `listener` from a thread of its own (a small tokio runtime).
    pub fn start(listener: TcpListener, settings: &ApiSettings, state: ApiState) -> Result<Self, ApiError> {
        let addr = listener.local_addr().map_err(ApiError::Start)?;
        let app = router(state, settings.max_body);
        let handle = axum_server::Handle::new();
        let h = handle.clone();
        let tls = settings.tls.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("api")
            .enable_all()
            .build()
            .map_err(ApiError::Start)?;
        let thread = std::thread::Builder::new()
            .name("api".into())
            .spawn(move || {
                rt.block_on(async move {
                    let service = app.into_make_service_with_connect_info::<SocketAddr>();
                    let r = match tls {
                        Some(cfg) => {
                            match axum_server::from_tcp_rustls(listener, axum_server::tls_rustls::RustlsConfig::from_config(cfg)) {
                                Ok(s) => {
                                    let mut s = s.handle(h);
                                    s.http_builder().http1().max_buf_size(MAX_HEADERS);
                                    s.http_builder().http2().max_header_list_size(MAX_HEADERS as u32);
                                    s.serve(service).await
                                }
                                Err(e) => Err(e),
                            }
                        }
                        None => match axum_server::from_tcp(listener) {
                            Ok(s) => {
                                let mut s = s.handle(h);
                                s.http_builder().http1().max_buf_size(MAX_HEADERS);
                                s.http_builder().http2().max_header_list_size(MAX_HEADERS as u32);
                                s.serve(service).await
                            }
                            Err(e) => Err(e),
                        },
                    };
                    if let Err(e) = r {
                        tracing::error!("API server: {e}");
                    }
                });
            })
            .map_err(ApiError::Start)?;
        Ok(Server { addr, handle, thread: Some(thread) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop: connections get `grace` to finish (live results streams are cut).
    pub fn stop(mut self, grace: Duration) {
        self.handle.graceful_shutdown(Some(grace));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn accepted_connections_inherit_the_listeners_fixed_send_buffer() {
        let l = super::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        l.set_nonblocking(false).unwrap();
        let (s, _) = l.accept().unwrap();
        // Linux reports twice the figure set (its bookkeeping).
        assert_eq!(socket2::SockRef::from(&s).send_buffer_size().unwrap(), 2 * super::SOCKET_SEND_BUF);
    }
}
