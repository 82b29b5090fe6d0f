//! `/v1/streams`: list, add and remove streams while the pipeline runs.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value};

use super::{ApiState, ControlError, error};

pub fn routes() -> Router<ApiState> {
    Router::new().route("/v1/streams", get(list).post(add)).route("/v1/streams/{id}", get(one).delete(remove))
}

/// The HTTP status of a refused request.
pub fn status_of(e: &ControlError) -> StatusCode {
    match e {
        ControlError::NotFound(_) => StatusCode::NOT_FOUND,
        ControlError::Duplicate(_) => StatusCode::CONFLICT,
        ControlError::Stopping => StatusCode::SERVICE_UNAVAILABLE,
        ControlError::Static(_) => StatusCode::CONFLICT,
        ControlError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
        ControlError::UnknownTemplate { .. } | ControlError::NotAllowed { .. } | ControlError::Invalid(_) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
    }
}

async fn list(State(s): State<ApiState>) -> Response {
    Json(serde_json::json!({ "streams": s.control.streams() })).into_response()
}

async fn one(State(s): State<ApiState>, Path(id): Path<String>) -> Response {
    match s.control.stream(&id) {
        Some(st) => Json(st).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no stream `{id}`: GET /v1/streams lists them")),
    }
}

async fn add(State(s): State<ApiState>, body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return error(e.status(), format!("cannot read the body: {}", e.body_text())),
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body must be a JSON object: {e}")),
    };
    let Value::Object(mut fields) = body else {
        return error(StatusCode::BAD_REQUEST, "the body must be a JSON object: {\"source\": \"TEMPLATE\", \"id\": \"NAME\", ...}");
    };
    let (source, id) = match (fields.remove("source"), fields.remove("id")) {
        (Some(Value::String(s)), Some(Value::String(i))) => (s, i),
        (Some(Value::String(_)), _) => return error(StatusCode::UNPROCESSABLE_ENTITY, "`id` (a string) is needed: the new stream's name"),
        _ => return error(StatusCode::UNPROCESSABLE_ENTITY, "`source` (a string) is needed: the template to add the stream to"),
    };
    let fields: Map<String, Value> = fields;
    let control = s.control.clone();
    let r = tokio::task::spawn_blocking(move || control.add_stream(&source, &id, &fields)).await;
    match r {
        Ok(Ok(st)) => {
            let location = format!("/v1/streams/{}", st.id);
            (StatusCode::CREATED, [(axum::http::header::LOCATION, location)], Json(st)).into_response()
        }
        Ok(Err(ControlError::TooMany { limit, max })) => {
            // Which limit: `template` (its `max_streams`) or `total` (`api.max_streams`).
            let e = ControlError::TooMany { limit: limit.clone(), max };
            let status = StatusCode::TOO_MANY_REQUESTS;
            let body = serde_json::json!({ "error": e.to_string(), "status": status.as_u16(), "limit": limit.name(), "max_streams": max });
            (status, Json(body)).into_response()
        }
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("adding the stream failed: {e}")),
    }
}

async fn remove(State(s): State<ApiState>, Path(id): Path<String>) -> Response {
    let control = s.control.clone();
    let wait = s.drain_wait;
    match tokio::task::spawn_blocking(move || control.remove_stream(&id, wait)).await {
        Ok(Ok(st)) => Json(st).into_response(),
        Ok(Err(e)) => error(status_of(&e), e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("removing the stream failed: {e}")),
    }
}
