//! Human-readable text for supervisor events and service states, shared by
//! the TUI and the headless printer.

use std::time::Duration;

use omnidev_core::{Event, EventKind, ServiceState};

/// `1.5s` / `2s` / `250ms`.
pub fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// A short status for the header: `starting pid 12`, `ready pid 12`,
/// `restarting in 2s`, `crashed (exit code 1)`, …
pub fn state(state: &ServiceState, has_probe: bool) -> String {
    match state {
        ServiceState::Waiting => "waiting".to_owned(),
        ServiceState::Preparing => "preparing".to_owned(),
        ServiceState::Running { pid } if has_probe => format!("starting pid {pid}"),
        ServiceState::Running { pid } => format!("running pid {pid}"),
        ServiceState::Ready { pid } => format!("ready pid {pid}"),
        ServiceState::Restarting { after, .. } => format!("restarting in {}", duration(*after)),
        ServiceState::Stopping { pid } => format!("stopping pid {pid}"),
        ServiceState::Exited { status } if status.success() => format!("exited ({status})"),
        ServiceState::Exited { status } => format!("crashed ({status})"),
        ServiceState::Stopped => "stopped".to_owned(),
    }
}

/// The line an event deserves in a log view (`None` for log lines, which
/// are shown as they are, and for noise).
pub fn event(event: &Event) -> Option<String> {
    let name = event.service.as_deref().unwrap_or("pod");
    let text = match &event.kind {
        EventKind::Log { .. } => return None,
        EventKind::State { state } => match state {
            ServiceState::Waiting
            | ServiceState::Ready { .. }
            | ServiceState::Restarting { .. } => {
                return None;
            }
            ServiceState::Preparing => format!("{name} preparing"),
            ServiceState::Running { pid } => format!("{name} started (pid {pid})"),
            ServiceState::Stopping { pid } => format!("{name} stopping (pid {pid})"),
            ServiceState::Exited { status } => format!("{name} exited ({status})"),
            ServiceState::Stopped => format!("{name} stopped"),
        },
        EventKind::Ready => format!("{name} ready"),
        EventKind::ProbeTimedOut { after } => format!(
            "{name} not ready after {}; still checking, dependents wait",
            duration(*after)
        ),
        EventKind::Crashed {
            status, attempt: 0, ..
        } => format!("{name} crashed ({status}); not restarting"),
        EventKind::Crashed {
            status,
            attempt,
            backoff,
        } => format!(
            "{name} crashed ({status}); restart #{attempt} in {}",
            duration(*backoff)
        ),
        // The supervisor's own notice already names what a reload covers.
        EventKind::Reloading if event.service.is_none() => return None,
        EventKind::Reloading => format!("{name} reloading"),
        EventKind::PrepareStarted { step } => format!("{name}: {step} …"),
        EventKind::PrepareFinished {
            step,
            success: true,
        } => format!("{name}: {step} done"),
        EventKind::PrepareFinished {
            step,
            success: false,
        } => format!("{name}: {step} failed; starting {name} anyway"),
        EventKind::Notice { message } => match &event.service {
            Some(service) => format!("{service}: {message}"),
            None => message.clone(),
        },
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use omnidev_core::ExitStatus;

    use super::*;

    #[test]
    fn texts() {
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_secs(2)), "2s");
        assert_eq!(
            state(&ServiceState::Running { pid: 7 }, true),
            "starting pid 7"
        );
        assert_eq!(
            state(
                &ServiceState::Exited {
                    status: ExitStatus::Code(1)
                },
                false
            ),
            "crashed (exit code 1)"
        );
        let crash = Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("server".into()),
            kind: EventKind::Crashed {
                status: ExitStatus::Signal(9),
                attempt: 2,
                backoff: Duration::from_secs(2),
            },
        };
        assert_eq!(
            event(&crash).as_deref(),
            Some("server crashed (signal 9); restart #2 in 2s")
        );
    }
}
