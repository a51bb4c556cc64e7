//! The dashboard's buttons: `POST /api/act`, which asks a pod what the
//! CLI asks it, and `up` of a stopped pod (with `--allow-up` only).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::{Dashboard, json, no_pod, text};
use crate::control::protocol::Response as Answer;
use crate::control::{Ask, CallConnection};

/// How long an action lets the pod take (a restart waits for readiness).
const ACTION_WAIT: Duration = Duration::from_secs(300);

/// `POST /api/act` `{"pod", "action", "service", "label"}`: what the
/// CLI's `restart`, `stop`, `start`, `reload-profile` and `stop` (of the
/// pod) ask, the pod's answer as it gives it; and its `db snapshot`,
/// `db restore`, `db clone` (of database `service`, the profile's first
/// without it) and `db snapshots`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Act {
    pod: String,
    action: String,
    service: Option<String>,
    label: Option<String>,
}

pub(super) async fn act(State(state): State<Arc<Dashboard>>, Json(act): Json<Act>) -> Response {
    let Some(pod_dir) = state.pod_named(&act.pod) else {
        return no_pod();
    };
    if act.action == "up" && act.service.is_none() {
        return state.up(pod_dir).await;
    }
    if ["snapshot", "restore", "clone", "snapshots"].contains(&act.action.as_str()) {
        return data(pod_dir, act).await;
    }
    let services = act.service.clone().into_iter().collect::<Vec<_>>();
    let ask = match (act.action.as_str(), act.service) {
        ("restart", Some(service)) => {
            Ask::restart(crate::control::RestartScope::service(service), ACTION_WAIT)
        }
        ("stop", Some(_)) => Ask::stop(services, ACTION_WAIT),
        ("start", Some(_)) => Ask::start(services, ACTION_WAIT),
        ("stop", None) => Ask::stop_pod(),
        ("reload-profile", None) => Ask::reload_profile(ACTION_WAIT),
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                "actions: restart, stop, start (of a service), stop (of the pod), reload-profile, \
                 up, snapshot, restore, clone, snapshots",
            );
        }
    };
    match tokio::task::spawn_blocking(move || ask.send(&pod_dir)).await {
        Ok(Ok(done)) => json(StatusCode::OK, &Answer::Done(Box::new(done))),
        Ok(Err(error)) => text(StatusCode::CONFLICT, &error.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the action failed"),
    }
}

/// A database action of the pod in `pod_dir`: `{"ok": true, "message"}`
/// (`{"ok": true, "snapshots": […]}` for `snapshots`), or the error as
/// text.
async fn data(pod_dir: PathBuf, act: Act) -> Response {
    let Ok(record) = omnidev_pod::read_ports(&pod_dir) else {
        return text(StatusCode::CONFLICT, "the pod records no checkout");
    };
    let which = crate::cli::DbWhich {
        pod: crate::cli::PodArgs { repo: record.repo, profile: None, pod_dir: Some(pod_dir) },
        name: act.service,
    };
    let done = tokio::task::spawn_blocking(move || -> crate::error::Result<serde_json::Value> {
        use crate::pod_data as db_data;
        let message = match (act.action.as_str(), act.label) {
            ("snapshots", _) => {
                let listed: Vec<serde_json::Value> = db_data::list(&which.pod)?
                    .iter()
                    .map(|s| {
                        serde_json::json!({"database": s.database, "label": s.label,
                            "engine": s.engine.word(), "taken-at": db_data::taken_at(s),
                            "bytes": s.bytes})
                    })
                    .collect();
                return Ok(serde_json::json!({"ok": true, "snapshots": listed}));
            }
            ("snapshot", label) => db_data::snapshot(&which, label.as_deref())?,
            ("restore", Some(label)) => db_data::restore(&which, &label)?,
            ("clone", None) => db_data::clone(&which, None)?,
            _ => {
                return Err(omnidev_pod::Error::DatabaseData {
                    name: which.name.unwrap_or_default(),
                    message: "restore needs a `label`; clone takes none".to_owned(),
                    help: "list them with the action `snapshots`".to_owned(),
                }
                .into());
            }
        };
        Ok(serde_json::json!({"ok": true, "message": message}))
    })
    .await;
    match done {
        Ok(Ok(answer)) => json(StatusCode::OK, &answer),
        Ok(Err(error)) => text(StatusCode::CONFLICT, &error.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the action failed"),
    }
}

impl Dashboard {
    /// `up` of the stopped pod in `pod_dir`: `omnidev up --detach` of its
    /// checkout ([`crate::detach::up`], as MCP's `up` runs it), answered
    /// as the other actions are (the pod's response); only with
    /// `--allow-up`.
    async fn up(&self, pod_dir: PathBuf) -> Response {
        if !self.allow_up {
            return text(
                StatusCode::FORBIDDEN,
                "`up` is offered only by `omnidev dashboard --allow-up`",
            );
        }
        let Ok(record) = omnidev_pod::read_ports(&pod_dir) else {
            return text(StatusCode::CONFLICT, "the pod records no checkout");
        };
        let pod = crate::cli::PodArgs { repo: record.repo, profile: None, pod_dir: Some(pod_dir) };
        let started = tokio::task::spawn_blocking(move || {
            crate::detach::up(&pod, ACTION_WAIT, &CallConnection::default())
        })
        .await;
        match started {
            Ok(Ok(started)) => json(StatusCode::OK, &Answer::Done(Box::new(started.response))),
            Ok(Err(error)) => text(StatusCode::CONFLICT, &error.to_string()),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "up failed"),
        }
    }
}
