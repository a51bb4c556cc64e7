//! The headless front-end's printer: `<service> | <line>`, names padded and
//! coloured (only on a terminal without `NO_COLOR`; see `output`), and
//! supervisor events as `omnidev | …`.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use anstyle::Style;
use omnidev_core::{Event, EventKind, Supervisor};

use crate::describe;
use crate::error::Result;
use crate::output::{self, SERVICE_STYLES, SUPERVISOR_STYLE};
use crate::session::{PreparedPod, banner};
use crate::terminal_text;

/// Turns events into output lines.
#[derive(Debug, Clone)]
pub struct Printer {
    width: usize,
    colour: bool,
    colours: HashMap<String, Style>,
}

impl Printer {
    /// A printer for these services (their order picks their colours).
    pub fn new(services: &[String], colour: bool) -> Self {
        let width = services
            .iter()
            .map(String::len)
            .chain(std::iter::once("omnidev".len()))
            .max()
            .unwrap_or(0);
        let colours = services
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), SERVICE_STYLES[i % SERVICE_STYLES.len()]))
            .collect();
        Self {
            width,
            colour,
            colours,
        }
    }

    fn prefix(&self, tag: &str) -> String {
        let style = self
            .colour
            .then(|| self.colours.get(tag).copied().unwrap_or(SUPERVISOR_STYLE));
        output::prefix(tag, self.width, style)
    }

    /// A line of text attributed to `tag`.
    pub fn line(&self, tag: &str, text: &str) -> String {
        format!(
            "{}{}",
            self.prefix(tag),
            terminal_text::for_output(text, self.colour)
        )
    }

    /// The output line for an event, if it deserves one.
    pub fn format(&self, event: &Event) -> Option<String> {
        match &event.kind {
            EventKind::Log { line } => Some(self.line(&line.service, &line.text)),
            _ => describe::event(event).map(|text| self.line("omnidev", &text)),
        }
    }
}

/// Prints the pod's output and events until every service has settled or
/// a signal comes; the exit code says whether every service exited 0.
pub async fn run_pod(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    mut events: tokio::sync::broadcast::Receiver<omnidev_core::Event>,
    signals: &mut omnidev_core::signals::ShutdownSignals,
) -> Result<ExitCode> {
    let names: Vec<String> = prepared
        .rendered
        .services
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let printer = Printer::new(&names, output::colour_stdout());
    let mut out = std::io::stdout();
    let mut print = |line: String| {
        // A closed stdout (e.g. `| head`) must not stop the pod.
        let _ = writeln!(out, "{line}");
    };
    for line in banner(prepared).iter().chain(&prepared.notices) {
        print(printer.line("omnidev", line));
    }
    let settled = supervisor.wait_settled();
    tokio::pin!(settled);
    let code = loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if let Some(line) = printer.format(&event) {
                        print(line);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    print(printer.line("omnidev", &format!("output fell behind: {n} events skipped")));
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break ExitCode::FAILURE,
            },
            settled = &mut settled => {
                // Flush what is already queued before leaving.
                while let Ok(event) = events.try_recv() {
                    if let Some(line) = printer.format(&event) {
                        print(line);
                    }
                }
                let ok = settled.success;
                print(printer.line(
                    "omnidev",
                    if ok { "every service exited 0" } else { "a service failed" },
                ));
                break if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
            }
            signal = signals.recv() => {
                print(printer.line("omnidev", &format!("{signal:?}: stopping the pod")));
                break ExitCode::SUCCESS;
            }
        }
    };
    Ok(code)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::tui::app::tests::log;

    #[test]
    fn plain_output_is_padded_and_stripped() {
        let printer = Printer::new(&["server".into(), "db".into()], false);
        assert_eq!(
            printer
                .format(&log("db", "\x1b[31mready\x1b[0m", 1))
                .as_deref(),
            Some("db      | ready")
        );
        let ready = Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("server".into()),
            kind: EventKind::Ready,
        };
        assert_eq!(
            printer.format(&ready).as_deref(),
            Some("omnidev | server ready")
        );
    }

    #[test]
    fn coloured_output_keeps_child_colours() {
        let printer = Printer::new(&["server".into()], true);
        let out = printer
            .format(&log("server", "\x1b[31mx\x1b[0m", 1))
            .expect("line");
        assert!(out.starts_with("\x1b[36mserver "), "{out:?}");
        assert!(out.ends_with("\x1b[31mx\x1b[0m"), "{out:?}");
    }
}
