//! `omnidev events`: the running pod's kept events (see
//! `control::retained` for the bound), then with `-f` every new one, as
//! text or as JSON records (`--json`, docs/events.md).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use omnidev_core::event::format_duration;

use crate::cli::EventsArgs;
use crate::control::client::{Line, MAX_LINE_BYTES};
use crate::control::events::{Body, Record};
use crate::control::{self, Request};
use crate::error::Error;

/// How long the pod has to answer (and, without `-f`, to send the kept
/// events).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs `omnidev events`: exit 0 when the stream ended (everything kept
/// was printed, or the pod stopped), 1 when the pod dropped this reader
/// for falling behind (the last record says so).
pub fn run(args: &EventsArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    let request = Request::Events {
        follow: args.follow,
        services: args.services.clone(),
        logs: args.logs,
        since_ms: args
            .since
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        since_reload: args.since_reload,
        // Finished lines only: a line printed once is never taken back.
        partial: false,
    };
    let records = control::stream(pod_dir, &request, ANSWER_TIMEOUT, args.follow)?;
    let mut out = std::io::stdout().lock();
    let mut lagged = false;
    // A read error (the pod went away mid-line) ends the stream like EOF.
    for line in records {
        let Line::Text(line) = line else {
            note!(
                "omnidev: a record longer than {} KiB was skipped (`omnidev logs` has every line)",
                MAX_LINE_BYTES / 1024
            );
            continue;
        };
        let line = String::from_utf8_lossy(&line);
        let record = serde_json::from_str::<Record>(&line).ok();
        lagged = record
            .as_ref()
            .is_some_and(|r| matches!(r.body, Body::Lagged { .. }));
        let text = match (&record, args.json) {
            (_, true) => crate::terminal_text::json(&line).into_owned(),
            (None, false) => crate::terminal_text::quote(&line).into_owned(),
            (Some(record), false) => human(record),
        };
        let written = writeln!(out, "{text}").and_then(|()| out.flush());
        if written.is_err() {
            return Err(Error::OutputClosed.into());
        }
    }
    if lagged {
        note!("omnidev: the pod dropped this reader for falling behind (see the last event)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `14:18:38.123 server crashed (exit code 1); restart #1 in 1s`.
fn human(record: &Record) -> String {
    let time = record.ts.get(11..23).unwrap_or(&record.ts);
    let who = record.service.as_deref().unwrap_or("pod");
    let what = match &record.body {
        Body::State { detail, reason, .. } => match reason {
            Some(reason) => format!("{detail}: {reason}"),
            None => detail.clone(),
        },
        Body::Ready => "ready".to_owned(),
        Body::ProbeTimeout { after_ms } => {
            format!("not ready after {}", format_duration(millis(*after_ms)))
        }
        Body::Crashed {
            exit, attempt: 0, ..
        } => format!("crashed ({exit}); not restarting"),
        Body::Crashed {
            exit,
            attempt,
            backoff_ms,
        } => format!(
            "crashed ({exit}); restart #{attempt} in {}",
            format_duration(millis(*backoff_ms))
        ),
        Body::Exited { exit } => format!("exited ({exit})"),
        Body::Reload {
            services,
            files,
            files_total,
        } => {
            let changes = omnidev_core::Changes {
                paths: files.clone(),
                total: *files_total,
            };
            if changes.is_empty() {
                format!("reload {}", services.join(", "))
            } else {
                format!("reload {}: {changes}", services.join(", "))
            }
        }
        Body::Log { line, .. } => format!("| {}", crate::terminal_text::sanitise(line, false)),
        Body::Port { name, port } => format!("port {name} {port}"),
        Body::Url { name, url } => format!("url {name} {url}"),
        Body::PrepareStarted { step } => format!("{step} …"),
        Body::PrepareFinished {
            step,
            success: true,
        } => format!("{step} done"),
        Body::PrepareFinished { step, .. } => format!("{step} failed"),
        Body::Notice { message }
        | Body::Debug { message }
        | Body::Lagged { message }
        | Body::ProfileChanged(omnidev_core::ProfileChange { message, .. })
        | Body::ProfileApplied(omnidev_core::ProfileApplied { message, .. }) => {
            crate::terminal_text::message(message).into_owned()
        }
        Body::Lost { count, reason } => format!("{count} records lost ({reason})"),
        Body::Ended { services } => {
            let endings: Vec<&str> = services.iter().map(|s| s.detail.as_str()).collect();
            format!("ended: {}", endings.join("; "))
        }
    };
    format!("{time} {who} {what}")
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
