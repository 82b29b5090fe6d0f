//! Bearer tokens and roles. `viewer` reads (status, results, metrics, the
//! pipeline), `operator` also changes streams and asks for inference, `admin`
//! may do everything. Tokens come from `[pipeline] api.tokens` (`${VAR}`
//! expanded) or a tokens file, and are compared in constant time. Without any
//! token the API is open (allowed on a loopback address only).

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::{ApiState, error};
use crate::config::api::ApiConfig;
use crate::config::{Diagnostics, PipelineConfig};

/// What a token may do; each role may do what those before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// The tokens the API accepts.
#[derive(Default)]
pub struct Auth {
    tokens: Vec<(Vec<u8>, Role)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({} tokens)", self.tokens.len())
    }
}

/// The most of a refused request's body read before answering.
const REFUSED_BODY: usize = 1 << 20;

/// Tokens shorter than this are refused: they could be guessed.
pub const MIN_TOKEN: usize = 16;

impl Auth {
    /// No tokens: every request may do everything.
    pub fn open() -> Self {
        Auth::default()
    }

    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// `tokens` (pairs of role and token).
    pub fn with_tokens(tokens: impl IntoIterator<Item = (Role, String)>) -> Self {
        Auth { tokens: tokens.into_iter().map(|(r, t)| (t.into_bytes(), r)).collect() }
    }

    /// The tokens of `[pipeline] api`: every error found (each bad entry, each
    /// bad line of the tokens file, each token listed under two roles), not only the first.
    pub fn from_config(cfg: &PipelineConfig, api: &ApiConfig) -> Result<Self, Diagnostics> {
        let mut errors = Vec::new();
        // (role, token, where it is written, the span to mark)
        let mut tokens: Vec<(Role, String, String, std::ops::Range<usize>)> = Vec::new();
        for t in &api.tokens {
            let Some(role) = Role::parse(t.role.get_ref()) else {
                errors.push(
                    cfg.diag(t.role.span(), format!("unknown role `{}`", t.role.get_ref())).with_help("roles: viewer, operator, admin"),
                );
                continue;
            };
            let token = match cfg.expand(&t.token) {
                Ok(t) => t,
                Err(d) => {
                    errors.push(d);
                    continue;
                }
            };
            if token.len() < MIN_TOKEN {
                errors.push(cfg.diag(t.token.span(), format!("a token must be at least {MIN_TOKEN} characters")));
                continue;
            }
            let at = cfg.diag(t.token.span(), "");
            tokens.push((role, token, format!("`api.tokens` ({}:{}:{})", at.file.display(), at.line, at.column), t.token.span()));
        }
        if let Some(f) = &api.tokens_file {
            match cfg.resolve_path(f) {
                Err(d) => errors.push(d),
                Ok(path) => match std::fs::read_to_string(&path) {
                    Err(e) => errors.push(cfg.diag(f.span(), format!("cannot read tokens file {}: {e}", path.display()))),
                    Ok(text) => {
                        for (n, line) in text.lines().enumerate() {
                            let line = line.trim();
                            if line.is_empty() || line.starts_with('#') {
                                continue;
                            }
                            let at = format!("tokens file {} line {}", path.display(), n + 1);
                            let Some((role, token)) = line.split_once(char::is_whitespace) else {
                                errors.push(cfg.diag(f.span(), format!("{at}: expected `ROLE TOKEN`")));
                                continue;
                            };
                            let Some(role) = Role::parse(role) else {
                                errors.push(cfg.diag(f.span(), format!("{at}: unknown role `{role}` (viewer, operator, admin)")));
                                continue;
                            };
                            let token = token.trim();
                            if token.len() < MIN_TOKEN {
                                errors.push(cfg.diag(f.span(), format!("{at}: a token must be at least {MIN_TOKEN} characters")));
                                continue;
                            }
                            tokens.push((role, token.to_string(), at, f.span()));
                        }
                    }
                },
            }
        }
        // One token, one role: a token written under two would silently get the higher.
        for (i, (role, token, at, span)) in tokens.iter().enumerate() {
            if let Some((first, _, first_at, _)) = tokens[..i].iter().find(|(r, t, ..)| r != role && t == token) {
                errors.push(
                    cfg.diag(
                        span.clone(),
                        format!("{at}: this token is also {first_at} with another role (`{}` there, `{}` here)", first.name(), role.name()),
                    )
                    .with_help("each token has one role: remove it from one place, or give one of them a new token"),
                );
            }
        }
        if !errors.is_empty() {
            return Err(Diagnostics(errors));
        }
        Ok(Auth::with_tokens(tokens.into_iter().map(|(r, t, ..)| (r, t))))
    }

    /// The role of `token`: every token is compared, each in constant time.
    pub fn role_of(&self, token: &[u8]) -> Option<Role> {
        let mut found = None;
        for (t, role) in &self.tokens {
            if bool::from(t.as_slice().ct_eq(token)) {
                found = Some(found.map_or(*role, |r: Role| r.max(*role)));
            }
        }
        found
    }
}

/// Who made a request: the role of its token (`None`: the API is open, every request may do everything).
#[derive(Debug, Clone, Copy)]
pub struct Caller(pub Option<Role>);

/// Whether `path` is the live view's page or one of its files (`super::ui`; open to all: they hold no data).
pub fn is_page(path: &str) -> bool {
    matches!(path, "/" | "/ui" | "/ui/" | "/ui/app.js" | "/ui/app.css" | "/ui/icon.svg")
}

/// The role a request needs; `None`: open to all (`/healthz`).
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    match (method, path) {
        (_, "/healthz") => None,
        // The page and its files hold no data: it signs in by itself.
        (&Method::GET | &Method::HEAD, p) if is_page(p) => None,
        (&Method::GET | &Method::HEAD, _) => Some(Role::Viewer),
        (_, p) if p.starts_with("/v1/streams") || p.starts_with("/v1/infer") => Some(Role::Operator),
        // gRPC: `/package.Service/Method`; subscriptions only read.
        (&Method::POST, p) if p.ends_with("/Subscribe") || p.ends_with("/Results") => Some(Role::Viewer),
        (&Method::POST, p) if !p.starts_with("/v1/") && p.matches('/').count() == 2 => Some(Role::Operator),
        _ => Some(Role::Admin),
    }
}

/// The token of an `Authorization` value: the scheme `Bearer` in any case
/// (RFC 9110: schemes are case-insensitive), then the token.
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii_start();
    let (scheme, rest) = value.split_at(value.iter().position(|b| *b == b' ' || *b == b'\t')?);
    let token = rest.trim_ascii();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

/// The auth layer: 401 without a valid token, 403 when its role may not.
pub async fn require(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(need) = required_role(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let mut req = req;
    if state.auth.is_open() {
        req.extensions_mut().insert(Caller(None));
        return next.run(req).await;
    }
    let token = req.headers().get(header::AUTHORIZATION).and_then(|v| bearer(v.as_bytes())).map(<[u8]>::to_vec);
    let unauthorized = |msg: &str| {
        let mut r = error(StatusCode::UNAUTHORIZED, msg);
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        r
    };
    let verdict = match token {
        None => Err(unauthorized("a bearer token is needed: send `Authorization: Bearer TOKEN`")),
        Some(token) => match state.auth.role_of(&token) {
            None => Err(unauthorized("the bearer token is not valid")),
            Some(role) if role < need => {
                Err(error(StatusCode::FORBIDDEN, format!("this needs the `{}` role; the token has `{}`", need.name(), role.name())))
            }
            Some(role) => Ok(role),
        },
    };
    match verdict {
        Ok(role) => {
            req.extensions_mut().insert(Caller(Some(role)));
            next.run(req).await
        }
        Err(r) => {
            // Read what the client sends first (bounded): an HTTP/2 answer before the body would reset the stream and lose it.
            let _ = axum::body::to_bytes(req.into_body(), REFUSED_BODY).await;
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_by_route() {
        assert_eq!(required_role(&Method::GET, "/healthz"), None);
        assert_eq!(required_role(&Method::GET, "/v1/streams"), Some(Role::Viewer));
        assert_eq!(required_role(&Method::POST, "/v1/streams"), Some(Role::Operator));
        assert_eq!(required_role(&Method::DELETE, "/v1/streams/a"), Some(Role::Operator));
        assert_eq!(required_role(&Method::POST, "/v1/infer"), Some(Role::Operator));
        assert_eq!(required_role(&Method::PUT, "/v1/pipeline"), Some(Role::Admin));
        assert_eq!(required_role(&Method::GET, "/ui/"), None);
        assert_eq!(required_role(&Method::GET, "/ui/app.js"), None);
        // Only reading the page is open.
        assert_eq!(required_role(&Method::PUT, "/ui/"), Some(Role::Admin));
        assert_eq!(required_role(&Method::GET, "/v1/streams/a/live.mjpeg"), Some(Role::Viewer));
        assert_eq!(required_role(&Method::GET, "/v1/live/streams"), Some(Role::Viewer));
    }

    #[test]
    fn the_bearer_scheme_in_any_case() {
        for v in ["Bearer tok", "bearer tok", "BEARER  tok ", "bEaReR\ttok"] {
            assert_eq!(bearer(v.as_bytes()), Some(&b"tok"[..]), "{v}");
        }
        for v in ["Basic tok", "Bearertok", "Bearer ", "tok", ""] {
            assert_eq!(bearer(v.as_bytes()), None, "{v}");
        }
    }

    #[test]
    fn tokens_give_their_role() {
        let a = Auth::with_tokens([(Role::Viewer, "v".repeat(20)), (Role::Admin, "a".repeat(20))]);
        assert_eq!(a.role_of("v".repeat(20).as_bytes()), Some(Role::Viewer));
        assert_eq!(a.role_of("a".repeat(20).as_bytes()), Some(Role::Admin));
        assert_eq!(a.role_of("a".repeat(19).as_bytes()), None);
        assert_eq!(a.role_of(b""), None);
    }
}
