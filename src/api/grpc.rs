//! The gRPC service of `infer-stream serve` (`proto/infer_stream.proto`,
//! package `infer_stream.v1`), on the API's listener: unary `Infer` (one
//! picture through a `kind = "request"` source, the same path as `POST
//! /v1/infer`) and server-streaming `Results` (the live results of the
//! streams, from the runtime's [`ResultsHub`](super::ResultsHub)). Roles
//! apply as for HTTP: the bearer token goes in the `authorization` metadata.

use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::ApiState;
use super::infer::{hub_for, submit};
use crate::runtime::request::RequestError;
use crate::runtime::results::Delivery;

/// The code generated from `proto/infer_stream.proto` (by build.rs).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("infer_stream.v1");
}

use pb::infer_stream_server::{InferStream, InferStreamServer};

/// The service, holding what the HTTP handlers hold.
pub struct Service {
    state: ApiState,
}

/// Room in a message for what is not the picture.
const MESSAGE_ROOM: usize = 64 * 1024;

/// The gRPC routes, to be merged into the API's router. Messages may be as
/// large as the largest picture a request source accepts (plus the rest of the message).
pub fn routes(state: &ApiState) -> axum::Router {
    let largest = state.control.request_hubs().iter().map(|h| h.limits().max_bytes).max().unwrap_or(0);
    let svc = InferStreamServer::new(Service { state: state.clone() }).max_decoding_message_size(largest + MESSAGE_ROOM);
    tonic::service::Routes::new(svc)
        .into_axum_router()
        .layer(axum::middleware::map_response(move |r: axum::response::Response| async move { too_large(r, largest) }))
}

/// tonic refuses a message over its decoding limit with `OUT_OF_RANGE`
/// before the handler sees it; a picture too large is `RESOURCE_EXHAUSTED`
/// (gRPC's code for a message over a limit, and what a picture over
/// `max_bytes` that fits in the message gets from [`status`]), whatever its size.
fn too_large(mut r: axum::response::Response, largest: usize) -> axum::response::Response {
    let h = r.headers_mut();
    let over = h.get("grpc-status").is_some_and(|v| v == "11")
        && h.get("grpc-message").and_then(|m| m.to_str().ok()).is_some_and(|m| m.contains("message%20length%20too%20large"));
    if over {
        let status = Status::resource_exhausted(format!(
            "the request is too large: a picture may be at most {largest} bytes (the request source's `max_bytes`)"
        ));
        let _ = status.add_header(h);
    }
    r
}

/// A request's status when it got no results.
fn status(e: RequestError) -> Status {
    let msg = e.to_string();
    match e {
        RequestError::TooLarge { .. } => Status::resource_exhausted(msg),
        RequestError::BadImage(_) => Status::invalid_argument(msg),
        RequestError::Busy { .. } | RequestError::Stopped => Status::unavailable(msg),
        RequestError::Timeout(_) => Status::deadline_exceeded(msg),
        RequestError::Failed(_) => Status::internal(msg),
    }
}

/// The deadline a gRPC client set (`grpc-timeout`: digits and a unit).
fn grpc_timeout<T>(req: &Request<T>) -> Option<Duration> {
    let v = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

type ResultsStream = Pin<Box<dyn Stream<Item = Result<pb::ResultMessage, Status>> + Send>>;

#[tonic::async_trait]
impl InferStream for Service {
    async fn infer(&self, req: Request<pb::InferRequest>) -> Result<Response<pb::InferReply>, Status> {
        let client_deadline = grpc_timeout(&req);
        let r = req.into_inner();
        let hub = hub_for(&self.state, Some(&r.source)).map_err(|(_, why)| Status::not_found(why))?;
        let timeout = match r.timeout_ms {
            0 => client_deadline,
            ms => Some(Duration::from_millis(ms as u64)),
        };
        let reply = submit(&hub, r.image, timeout).await.map_err(status)?;
        let boxes = reply
            .boxes
            .iter()
            .map(|b| pb::DetectedBox {
                node: b.node.to_string(),
                x0: b.bbox[0],
                y0: b.bbox[1],
                x1: b.bbox[2],
                y1: b.bbox[3],
                score: b.score,
                class_id: b.class,
                label: b.label.as_deref().unwrap_or_default().to_string(),
                text: b.text.clone().unwrap_or_default(),
            })
            .collect();
        Ok(Response::new(pb::InferReply {
            request_id: reply.id,
            results_json: reply.json.to_string(),
            boxes,
            width: reply.width,
            height: reply.height,
        }))
    }

    type ResultsStream = ResultsStream;

    async fn results(&self, req: Request<pb::ResultsRequest>) -> Result<Response<Self::ResultsStream>, Status> {
        let stream = req.into_inner().stream;
        let sub = self.state.results().subscribe((!stream.is_empty()).then_some(stream));
        // One message in hand at a time: a slow client leaves the rest in the
        // subscription's buffer, which drops its oldest and says how many.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            let mut missed = 0;
            loop {
                let next = tokio::select! {
                    d = sub.next() => d,
                    _ = tx.closed() => break,
                };
                let item = match next {
                    Delivery::Dropped(n) => {
                        missed += n;
                        continue;
                    }
                    Delivery::Item(p) => p,
                };
                let msg = pb::ResultMessage {
                    kind: item.kind.name().to_string(),
                    stream: item.stream.to_string(),
                    json: item.json.to_string(),
                    dropped: std::mem::take(&mut missed),
                };
                if tx.send(Ok(msg)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}
