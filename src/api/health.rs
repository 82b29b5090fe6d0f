//! `/healthz`, `/readyz`, `/metrics`, `/v1/pipeline` and `/v1/openapi.json`.

use axum::Json;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiState, error};

/// The OpenAPI document the server serves (docs/openapi.json).
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok\n") }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/pipeline", get(pipeline))
        .route("/v1/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }))
}

/// Ready: the pipeline's readiness (built, sources delivering, no required
/// stream of the file lost), and every required added stream delivering.
pub fn readiness(s: &ApiState) -> Result<(), String> {
    s.metrics.readiness()?;
    s.control.streams_ready()
}

async fn readyz(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let verbose = q.as_deref().is_some_and(|q| q.split('&').any(|k| k == "verbose" || k.starts_with("verbose=")));
    let verdict = readiness(&s);
    let mut text = match &verdict {
        Ok(()) => "ready\n".to_string(),
        Err(why) => format!("{why}\n"),
    };
    if verbose {
        for st in s.control.streams() {
            text.push_str(&format!(
                "  stream `{}` ({}): {}{}\n",
                st.id,
                st.source,
                serde_json::to_value(st.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                if st.required { "" } else { " (not required)" }
            ));
        }
    }
    let status = if verdict.is_ok() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

async fn metrics(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    let openmetrics = headers.get_all(header::ACCEPT).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
    match crate::metrics::server::encode(&s.metrics, openmetrics) {
        Ok((content_type, body)) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(()) => error(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics"),
    }
}

async fn pipeline(State(s): State<ApiState>) -> Response {
    let view = s.control.pipeline();
    let mut v = serde_json::to_value(view).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("ready".into(), readiness(&s).is_ok().into());
        o.insert("streams".into(), serde_json::to_value(s.control.streams()).unwrap_or_default());
    }
    Json(v).into_response()
}
