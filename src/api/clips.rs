//! `/v1/clips`: the event clips a `clips` sink wrote and still keeps (list),
//! and one clip's file (download). Both read; the viewer role may.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiState, error};

pub fn routes() -> Router<ApiState> {
    Router::new().route("/v1/clips", get(list)).route("/v1/clips/{id}", get(download))
}

async fn list(State(s): State<ApiState>) -> Response {
    Json(serde_json::json!({ "clips": s.control.clips() })).into_response()
}

async fn download(State(s): State<ApiState>, Path(id): Path<String>) -> Response {
    let Ok(n) = id.parse::<u64>() else {
        return error(StatusCode::NOT_FOUND, format!("no clip `{id}`: clip ids are numbers, GET /v1/clips lists them"));
    };
    let Some(clip) = s.control.clips().into_iter().find(|c| c.id == n) else {
        return error(StatusCode::NOT_FOUND, format!("no clip {n}: GET /v1/clips lists the clips kept"));
    };
    let path = clip.path.clone();
    let read = tokio::task::spawn_blocking(move || std::fs::read(&path)).await;
    match read {
        Ok(Ok(bytes)) => {
            let name = clip.path.file_name().map(|f| f.to_string_lossy().replace('"', "_")).unwrap_or_else(|| format!("clip-{n}.mp4"));
            (
                [
                    (header::CONTENT_TYPE, "video/mp4".to_string()),
                    (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
                ],
                bytes,
            )
                .into_response()
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => error(StatusCode::GONE, format!("clip {n} was deleted from disk")),
        _ => error(StatusCode::INTERNAL_SERVER_ERROR, format!("clip {n} cannot be read")),
    }
}
