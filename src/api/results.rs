//! `GET /v1/results?stream=A&stream=B`: live results as server-sent events.
//! Each `frame` or `event` SSE event carries the JSON the `ndjson` sink writes;
//! a `dropped` event says how many items this subscriber lost to a full buffer.
//! `kind=event`: stream events only (the live view's events feed).

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiState, Delivery};

pub fn routes() -> Router<ApiState> {
    Router::new().route("/v1/results", get(results))
}

/// The `stream` parameters of a query string (`stream=a&stream=b` or `stream=a,b`).
pub fn streams_of(query: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for pair in query.unwrap_or("").split('&') {
        if let Some(v) = pair.strip_prefix("stream=") {
            for s in v.split([',']).map(percent_decode).filter(|s| !s.is_empty()) {
                out.push(s);
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                Ok(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn results(State(s): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let events_only = q.as_deref().unwrap_or("").split('&').any(|p| p == "kind=event");
    let sub = s.results().subscribe_to(streams_of(q.as_deref()), events_only);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(1);
    tokio::spawn(async move {
        loop {
            let d = tokio::select! {
                d = sub.next() => d,
                _ = tx.closed() => break,
            };
            let ev = match d {
                Delivery::Item(p) => Event::default().event(p.kind.name()).data(&*p.json),
                Delivery::Dropped(n) => {
                    Event::default().event("dropped").data(serde_json::json!({ "dropped": n, "total": sub.dropped() }).to_string())
                }
            };
            if tx.send(Ok(ev)).await.is_err() {
                break;
            }
        }
    });
    unbuffered(
        Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response(),
    )
}

/// An endless answer (server-sent events, MJPEG): asks a reverse proxy not to
/// buffer it (`X-Accel-Buffering: no`, which nginx honours), so it reaches the
/// client as it is written, behind a proxy configured for nothing in particular.
pub(super) fn unbuffered(mut r: Response) -> Response {
    r.headers_mut().insert(axum::http::HeaderName::from_static("x-accel-buffering"), axum::http::HeaderValue::from_static("no"));
    r
}
