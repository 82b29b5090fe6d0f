//! The live view in the browser: one page (HTML, CSS and JavaScript under
//! `src/api/ui/`, built into the binary, nothing fetched from elsewhere) at
//! `/ui/`, and the security headers of every answer. The page holds no
//! credential: it asks for a token (kept in the tab's `sessionStorage`, or
//! given as `#token=T`) and calls the API with it; its URLs are relative, so
//! it works behind a path prefix.

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ApiState;
use super::auth::{Caller, is_page};

pub const INDEX: &str = include_str!("ui/index.html");
pub const SCRIPT: &str = include_str!("ui/app.js");
pub const STYLE: &str = include_str!("ui/app.css");
pub const ICON: &str = include_str!("ui/icon.svg");

/// The page's policy: its own files only, pictures from the API (as blobs), no inline script or style.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; \
                       base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(|| async { redirect("ui/") }))
        .route("/ui", get(|| async { redirect("ui/") }))
        .route("/ui/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX) }))
        .route("/ui/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT) }))
        .route("/ui/app.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE) }))
        .route("/ui/icon.svg", get(|| async { ([(header::CONTENT_TYPE, "image/svg+xml")], ICON) }))
        .route("/v1/me", get(me))
}

/// `GET /v1/me`: the caller's role (what the page offers), and whether the API asks for tokens.
async fn me(caller: Option<axum::Extension<Caller>>) -> Response {
    let role = caller.and_then(|c| c.0.0);
    axum::Json(serde_json::json!({ "role": role.map_or("admin", |r| r.name()), "auth": role.is_some() })).into_response()
}

/// A relative redirect: right behind a path prefix too.
fn redirect(to: &'static str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// `X-Content-Type-Options` and `Referrer-Policy` on every answer; the page's `Content-Security-Policy`.
pub async fn headers(req: Request, next: Next) -> Response {
    let page = is_page(req.uri().path());
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if page {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    r
}
