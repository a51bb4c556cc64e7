//! `omnidev events`: the running pod's kept events (see
//! `control::retained` for the bound), then with `-f` every new one, as
//! text or as JSON records (`--json`, docs/events.md).

use std::io::Write;
use std::process::ExitCode;

use crate::cli::EventsArgs;
use crate::control::client::{Line, MAX_LINE_BYTES};
use omnidev_core::EventKind;

use crate::control::events::Record;
use crate::control::{Ask, EventsQuery};
use crate::error::Error;

/// Runs `omnidev events`: exit 0 when the stream ended (everything kept
/// was printed, or the pod stopped), 1 when the pod dropped this reader
/// for falling behind (the last record says so).
pub fn run(args: &EventsArgs) -> miette::Result<ExitCode> {
    let pod_dir = &crate::session::running_pod_dir(&args.pod)?;
    // Finished lines only: a line printed once is never taken back.
    let query = EventsQuery {
        follow: args.follow,
        services: args.services.clone(),
        logs: args.logs,
        since_ms: (args.since).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        since_reload: args.since_reload,
        ..EventsQuery::default()
    };
    let records = Ask::events(query).stream(pod_dir)?;
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
        lagged = record.as_ref().is_some_and(|r| matches!(r.event.kind, EventKind::Lagged { .. }));
        let text = match (&record, args.json) {
            (_, true) => omnidev_core::text::json(&line).into_owned(),
            (None, false) => omnidev_core::text::quote(&line).into_owned(),
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

/// `14:18:38 server crashed (exit code 1); restart #1 in 1s`: each event
/// in core's wording (the `Display` of its [`omnidev_core::Event`]) after
/// the local time, as `--timestamps` shows it everywhere else.
fn human(record: &Record) -> String {
    let event = &record.event;
    let time = crate::output::clock(event.at);
    match &event.kind {
        EventKind::Log { line } | EventKind::PartialLine { line } => {
            format!("{time} {} | {}", line.service, omnidev_core::text::sanitise(&line.text, false))
        }
        _ => format!("{time} {}", omnidev_core::text::message(&event.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use omnidev_core::EventKind;

    use super::human;
    use crate::control::events::Encoder;
    use crate::control::events::tests::every_supervisor_event;

    #[test]
    fn every_event_is_worded_as_core_words_it() {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        for event in every_supervisor_event() {
            let want = match &event.kind {
                EventKind::Log { line } | EventKind::PartialLine { line } => {
                    let text = omnidev_core::text::sanitise(&line.text, false);
                    format!("{} | {text}", line.service)
                }
                _ => event.to_string(),
            };
            let text = human(&encoder.event(event.clone()));
            assert_eq!(text.get(9..), Some(want.as_str()), "{event:?}");
        }
    }
}
