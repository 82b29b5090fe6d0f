//! Live pictures and live status for viewers: `GET /v1/streams/{id}/live.mjpeg`
//! (MJPEG, `multipart/x-mixed-replace`, each part with its `Content-Length`),
//! `GET /v1/streams/{id}/snapshot.jpg` (the latest annotated picture) and
//! `GET /v1/live/streams` (the streams' status as server-sent events, once a
//! second). The pictures come from the runtime's live hub (through the
//! control handle): encoded once per picture whoever watches, each viewer
//! with a bounded buffer of its own.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiState, error};
use crate::runtime::live::LiveHub;

/// The MJPEG parts' boundary.
pub const BOUNDARY: &str = "infer-stream-frame";
/// How long a snapshot waits for a picture when none is fresh.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(3);

pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/streams/{id}/live.mjpeg", get(mjpeg))
        .route("/v1/streams/{id}/snapshot.jpg", get(snapshot))
        .route("/v1/live/streams", get(status_events))
}

/// `fps=N` of a query string.
fn fps_of(query: Option<&str>) -> Option<f64> {
    query?.split('&').find_map(|p| p.strip_prefix("fps=")).and_then(|v| v.parse::<f64>().ok())
}

/// The hub and the stream, or the answer saying why not.
fn hub_for<'a>(s: &'a ApiState, id: &str) -> Result<&'a LiveHub, Box<Response>> {
    if s.control.stream(id).is_none() {
        return Err(Box::new(error(StatusCode::NOT_FOUND, format!("no stream `{id}`: GET /v1/streams lists them"))));
    }
    s.control.live().ok_or_else(|| {
        Box::new(error(
            StatusCode::CONFLICT,
            "this pipeline shows no live pictures: it redacts pictures and no sink follows its `redact` stage (viewers never see raw frames)",
        ))
    })
}

async fn mjpeg(State(s): State<ApiState>, Path(id): Path<String>, RawQuery(q): RawQuery) -> Response {
    let fps = match fps_of(q.as_deref()) {
        Some(f) if !(f.is_finite() && f > 0.0) => return error(StatusCode::BAD_REQUEST, "`fps` must be a number above 0"),
        f => f.unwrap_or(crate::runtime::live::DEFAULT_FPS),
    };
    let hub = match hub_for(&s, &id) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let viewer = hub.watch(&id, fps);
    let control = s.control.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(1);
    tokio::spawn(async move {
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            let p = tokio::select! {
                p = viewer.next() => p,
                _ = tx.closed() => break,
                _ = check.tick() => {
                    // The stream was removed: the picture ends.
                    if control.stream(&id).is_none() {
                        break;
                    }
                    continue;
                }
            };
            let head =
                format!("--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {}\r\nX-Frame-Seq: {}\r\n\r\n", p.jpeg.len(), p.seq);
            let mut part = Vec::with_capacity(head.len() + p.jpeg.len() + 2);
            part.extend_from_slice(head.as_bytes());
            part.extend_from_slice(&p.jpeg);
            part.extend_from_slice(b"\r\n");
            if tx.send(Ok(Bytes::from(part))).await.is_err() {
                break;
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, format!("multipart/x-mixed-replace; boundary={BOUNDARY}")),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::HeaderName::from_static("x-accel-buffering"), "no".to_string()),
        ],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

async fn snapshot(State(s): State<ApiState>, Path(id): Path<String>) -> Response {
    let hub = match hub_for(&s, &id) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let picture = match hub.latest(&id, Duration::from_secs(1)) {
        Some(p) => Some(p),
        None => {
            // Nobody watches: watch for one picture.
            let viewer = hub.watch(&id, hub.max_fps());
            tokio::time::timeout(SNAPSHOT_WAIT, viewer.next()).await.ok()
        }
    };
    match picture {
        Some(p) => (
            [
                (header::CONTENT_TYPE, "image/jpeg".to_string()),
                (header::CACHE_CONTROL, "no-store".to_string()),
                (header::HeaderName::from_static("x-frame-seq"), p.seq.to_string()),
            ],
            Bytes::from(p.jpeg.to_vec()),
        )
            .into_response(),
        None => {
            let state = s.control.stream(&id).map(|st| serde_json::to_value(st.state).unwrap_or_default());
            let state = state.as_ref().and_then(|v| v.as_str()).unwrap_or("removed").to_string();
            // No picture now (the stream is not delivering): a 4xx, the server is fine.
            error(
                StatusCode::NOT_FOUND,
                format!("stream `{id}` has no picture now: none came in {} s (its state: {state}); try again", SNAPSHOT_WAIT.as_secs()),
            )
        }
    }
}

/// The streams' status (`GET /v1/streams`'s list) as a `streams` event now and every second.
async fn status_events(State(s): State<ApiState>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(1);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tx.closed() => break,
            }
            let body = serde_json::json!({ "streams": s.control.streams(), "live": s.control.live_hub().map(|h| h.view()) });
            if tx.send(Ok(Event::default().event("streams").data(body.to_string()))).await.is_err() {
                break;
            }
        }
    });
    super::results::unbuffered(
        Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn fps_from_the_query() {
        assert_eq!(super::fps_of(Some("fps=2.5")), Some(2.5));
        assert_eq!(super::fps_of(Some("a=1&fps=10")), Some(10.0));
        assert_eq!(super::fps_of(Some("fps=x")), None);
        assert_eq!(super::fps_of(None), None);
    }
}
