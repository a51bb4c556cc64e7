//! The headless front-end's printer: `<service> | <line>`, names padded and
//! coloured (unless `NO_COLOR` is set or output is not a terminal), and
//! supervisor events as `omnidev | …`.

use std::collections::HashMap;

use omnidev_core::{Event, EventKind};

use crate::describe;
use crate::tui::pane::strip_ansi;

/// SGR foreground codes matching the TUI palette.
const COLOURS: [u8; 6] = [36, 35, 33, 32, 34, 91];

/// Whether to colour output: only on a terminal, and never with a
/// non-empty `NO_COLOR`.
pub fn use_colour(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Turns events into output lines.
#[derive(Debug, Clone)]
pub struct Printer {
    width: usize,
    colour: bool,
    colours: HashMap<String, u8>,
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
            .map(|(i, name)| (name.clone(), COLOURS[i % COLOURS.len()]))
            .collect();
        Self {
            width,
            colour,
            colours,
        }
    }

    fn prefix(&self, tag: &str) -> String {
        let width = self.width;
        if !self.colour {
            return format!("{tag:<width$} | ");
        }
        match self.colours.get(tag) {
            Some(code) => format!("\x1b[{code}m{tag:<width$}\x1b[0m \x1b[2m|\x1b[0m "),
            None => format!("\x1b[1m{tag:<width$}\x1b[0m \x1b[2m|\x1b[0m "),
        }
    }

    /// A line of text attributed to `tag`.
    pub fn line(&self, tag: &str, text: &str) -> String {
        if self.colour {
            format!("{}{text}", self.prefix(tag))
        } else {
            format!("{}{}", self.prefix(tag), strip_ansi(text))
        }
    }

    /// The output line for an event, if it deserves one.
    pub fn format(&self, event: &Event) -> Option<String> {
        match &event.kind {
            EventKind::Log { line } => Some(self.line(&line.service, &line.text)),
            _ => describe::event(event).map(|text| self.line("omnidev", &text)),
        }
    }
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
