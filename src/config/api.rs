//! `[pipeline] api`: where and how `infer-stream serve` offers its API
//! (address, TLS, tokens and their roles, request limits).

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

/// The default API address: this machine only.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:8080";

/// `[pipeline] api = { ... }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// `IP:PORT`, or a port alone on 127.0.0.1 (default `127.0.0.1:8080`).
    pub listen: Option<Spanned<String>>,
    /// Serve HTTPS (and gRPC over TLS) with these files.
    pub tls: Option<TlsConfig>,
    /// Bearer tokens and their roles, written here (`${VAR}` expanded).
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// A file of tokens, one `ROLE TOKEN` per line (`#` comments).
    pub tokens_file: Option<Spanned<String>>,
    /// Largest request body accepted (bytes; default 1 MiB).
    pub max_body_bytes: Option<usize>,
    /// Results kept for a subscriber that is slow to read (default 256); the oldest go first.
    pub results_buffer: Option<usize>,
    /// The most streams added at run time listed at once, all templates together (default 64; more: `429`).
    pub max_streams: Option<Spanned<usize>>,
    /// The most live pictures a second a viewer may ask for (`GET /v1/streams/{id}/live.mjpeg?fps=N`; default 15).
    pub live_fps: Option<Spanned<f64>>,
}

/// The default of `api.max_streams`.
pub const DEFAULT_MAX_STREAMS: usize = 64;

/// `tls = { cert = "...", key = "...", client_ca = "..." }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM).
    pub cert: Spanned<String>,
    /// Its private key (PEM).
    pub key: Spanned<String>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    pub client_ca: Option<Spanned<String>>,
}

/// `{ role = "operator", token = "${OPERATOR_TOKEN}" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub role: Spanned<String>,
    pub token: Spanned<String>,
}

impl super::PipelineConfig {
    /// Where `serve` listens: `[pipeline] api.listen` expanded and parsed by
    /// [`super::listen_addr`], else [`DEFAULT_API_LISTEN`].
    pub fn api_listen(&self) -> Result<SocketAddr, super::Diagnostic> {
        let Some(value) = self.settings.api.as_ref().and_then(|a| a.listen.as_ref()) else {
            return Ok(DEFAULT_API_LISTEN.parse().expect("a valid address"));
        };
        let text = self.expand(value)?;
        super::listen_addr(&text).map_err(|e| {
            self.diag(value.span(), format!("invalid `api.listen` `{text}`: {e}"))
                .with_help("write a port (`8080`: this machine only), or an IP address and a port, e.g. `127.0.0.1:8080` or `0.0.0.0:8080`")
        })
    }
}
