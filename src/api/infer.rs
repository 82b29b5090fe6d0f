//! Request/response inference over HTTP: `POST /v1/infer` runs one picture
//! (JPEG or PNG: the body itself, or the first file of a multipart form)
//! through a `kind = "request"` source and answers with its frame's results,
//! the JSON object the `ndjson` sink writes for a frame. [`submit`] and
//! [`status_of`] are shared with gRPC's `Infer`.

use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio_stream::StreamExt;

use super::{ApiState, error};
use crate::runtime::request::{Reply, RequestError, RequestHub};

/// The header a request sets its own deadline with (milliseconds).
pub const TIMEOUT_HEADER: &str = "x-timeout-ms";

pub fn routes() -> Router<ApiState> {
    // The request source's `max_bytes` is the limit here, not the API's.
    Router::new().route("/v1/infer", post(infer)).layer(DefaultBodyLimit::disable())
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InferQuery {
    /// The request source, when the pipeline has more than one.
    source: Option<String>,
    timeout_ms: Option<u64>,
}

/// The request source `name` names (or the only one); `Err` with a status and why.
pub fn hub_for(state: &ApiState, name: Option<&str>) -> Result<RequestHub, (StatusCode, String)> {
    let hubs = state.control.request_hubs();
    let names = || hubs.iter().map(|h| format!("`{}`", h.name())).collect::<Vec<_>>().join(", ");
    match name.filter(|n| !n.is_empty()) {
        Some(n) => hubs
            .iter()
            .find(|h| &**h.name() == n)
            .cloned()
            .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no request source `{n}`; the pipeline's request sources: {}", names()))),
        None => match hubs {
            [h] => Ok(h.clone()),
            [] => Err((StatusCode::NOT_FOUND, "this pipeline has no `kind = \"request\"` source to run pictures through".into())),
            _ => Err((
                StatusCode::BAD_REQUEST,
                format!("this pipeline has several request sources ({}): name one with ?source=NAME", names()),
            )),
        },
    }
}

/// Run `picture` through `hub` with a deadline of `timeout` (default: the source's).
pub async fn submit(hub: &RequestHub, picture: Vec<u8>, timeout: Option<Duration>) -> Result<Reply, RequestError> {
    hub.submit(picture, timeout)?.wait().await
}

/// The HTTP status of a request that got no results.
pub fn status_of(e: &RequestError) -> StatusCode {
    match e {
        RequestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        RequestError::BadImage(_) => StatusCode::BAD_REQUEST,
        RequestError::Busy { .. } | RequestError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
        RequestError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        RequestError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn refused(e: RequestError) -> Response {
    let mut r = error(status_of(&e), e.to_string());
    if matches!(e, RequestError::Busy { .. }) {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RequestError::RETRY_AFTER_S));
    }
    r
}

/// The deadline a request asks for: `?timeout_ms=` or the `x-timeout-ms` header.
fn timeout_of(q: &InferQuery, headers: &HeaderMap) -> Result<Option<Duration>, String> {
    let ms = match (q.timeout_ms, headers.get(TIMEOUT_HEADER)) {
        (Some(ms), _) => Some(ms),
        (None, Some(v)) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("`{TIMEOUT_HEADER}` must be a whole number of milliseconds"))?,
        ),
        (None, None) => None,
    };
    match ms {
        Some(0) => Err("a deadline of 0 ms can never be met: give a positive `timeout_ms`".into()),
        ms => Ok(ms.map(Duration::from_millis)),
    }
}

/// The picture: the body, or the first file (else the first field) of a multipart form, at most `limit` bytes.
async fn picture_of(req: Request, limit: usize) -> Result<Vec<u8>, Response> {
    let too_large = |size: usize| refused(RequestError::TooLarge { size, limit });
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        && len > limit
    {
        return Err(too_large(len));
    }
    let multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"));
    let mut out = Vec::new();
    if multipart {
        let mut form = axum::extract::Multipart::from_request(req, &())
            .await
            .map_err(|e| error(StatusCode::BAD_REQUEST, format!("not a multipart form: {e}")))?;
        let bad = |e: axum::extract::multipart::MultipartError| error(StatusCode::BAD_REQUEST, format!("reading the multipart form: {e}"));
        let mut found = false;
        while let Some(mut field) = form.next_field().await.map_err(bad)? {
            if field.file_name().is_none() && field.name() != Some("image") {
                continue;
            }
            while let Some(chunk) = field.chunk().await.map_err(bad)? {
                if out.len() + chunk.len() > limit {
                    return Err(too_large(out.len() + chunk.len()));
                }
                out.extend_from_slice(&chunk);
            }
            found = true;
            break;
        }
        if !found {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "the multipart form has no file (send the picture as a file field, e.g. curl -F image=@photo.jpg)",
            ));
        }
    } else {
        let mut body = req.into_body().into_data_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| error(StatusCode::BAD_REQUEST, format!("reading the body: {e}")))?;
            if out.len() + chunk.len() > limit {
                return Err(too_large(out.len() + chunk.len()));
            }
            out.extend_from_slice(&chunk);
        }
    }
    Ok(out)
}

async fn infer(State(state): State<ApiState>, query: Result<Query<InferQuery>, QueryRejection>, req: Request) -> Response {
    // A bad query gets the API's JSON error, not the extractor's plain text.
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let hub = match hub_for(&state, q.source.as_deref()) {
        Ok(h) => h,
        Err((status, why)) => return error(status, why),
    };
    let timeout = match timeout_of(&q, req.headers()) {
        Ok(t) => t,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let picture = match picture_of(req, hub.limits().max_bytes).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    match submit(&hub, picture, timeout).await {
        Ok(reply) => (StatusCode::OK, axum::Json(reply.json)).into_response(),
        Err(e) => refused(e),
    }
}
