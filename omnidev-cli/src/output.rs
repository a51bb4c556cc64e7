//! What commands print: writes to stdout that survive a closed pipe, JSON,
//! and the colours of the `<service> | <line>` prefixes.

use std::io::Write;

use anstyle::{AnsiColor, Style};

use crate::control::PodStatus;
use crate::error::{Error, Result};
use omnidev_core::text::{quote, quote_path};

/// Colours given to services in order, by every front-end (the TUI's
/// tabs too).
pub const SERVICE_STYLES: [Style; 6] = [
    AnsiColor::Cyan.on_default(),
    AnsiColor::Magenta.on_default(),
    AnsiColor::Yellow.on_default(),
    AnsiColor::Green.on_default(),
    AnsiColor::Blue.on_default(),
    AnsiColor::BrightRed.on_default(),
];

/// The style of a tag that is not a service (`omnidev`).
pub const SUPERVISOR_STYLE: Style = Style::new().bold();

/// The style of the ` | ` separator.
pub const SEPARATOR_STYLE: Style = Style::new().dimmed();

/// Whether to colour stdout: a terminal, with neither `NO_COLOR` nor
/// `CLICOLOR=0` set (or `CLICOLOR_FORCE` set), as anstream decides.
pub fn colour_stdout() -> bool {
    anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
}

/// `<tag padded to width> | `, coloured with `style` when `colour`.
pub fn prefix(tag: &str, width: usize, style: Option<Style>) -> String {
    match style {
        None => format!("{tag:<width$} | "),
        Some(style) => {
            let separator = SEPARATOR_STYLE;
            format!("{style}{tag:<width$}{style:#} {separator}|{separator:#} ")
        }
    }
}

/// `HH:MM:SS`, local time: the stamp `--timestamps` puts before a line,
/// as foreman and honcho do.
pub fn clock(at: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Local>::from(at).format("%H:%M:%S").to_string()
}

/// Pretty JSON with a trailing newline.
pub fn json(value: &impl serde::Serialize) -> Result<String> {
    let text = serde_json::to_string_pretty(value).map_err(Error::Json)?;
    let mut text = omnidev_core::text::json(&text).into_owned();
    text.push('\n');
    Ok(text)
}

/// Writes omnidev's own text to stdout, through the one sanitiser (see
/// [`omnidev_core::text::message`]: no escape sequence a quoted name or
/// path holds is obeyed). A closed pipe (`omnidev status | head -1`) is
/// [`Error::OutputClosed`]: exit 1, quietly, never a panic.
pub fn write_stdout(text: &str) -> Result<()> {
    write_sanitised(&omnidev_core::text::message(text))
}

/// Writes service output to stdout that each line of went through
/// [`omnidev_core::text::sanitise`] already (its colours kept), as
/// [`write_stdout`] does otherwise.
pub fn write_sanitised(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Error::OutputClosed),
        Err(e) => Err(Error::Stdout(e)),
    }
}

/// A pod's ports as people read them: `server=6767 vite=5173`.
pub fn ports(ports: &std::collections::BTreeMap<String, u16>) -> String {
    let each: Vec<String> = ports.iter().map(|(name, port)| format!("{name}={port}")).collect();
    each.join(" ")
}

/// How often a front-end that shows usage while it is open (the TUI's
/// header, the dashboard) asks for it: measured only while someone looks.
pub const LIVE_USAGE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// A duration as `ls` shows an age: `45s`, `12m`, `3h`, `2d` (whole
/// units, rounded down).
pub fn ago(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// The human form of a status.
pub fn pod_status(status: &PodStatus) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "pod     {}", quote_path(&status.pod_dir));
    if let Some(host) = &status.host {
        let _ = writeln!(
            out,
            "host    {} (`omnidev up --host`; the pod directory is there)",
            quote(host)
        );
    }
    if let Some(repo) = &status.repo {
        let _ = writeln!(out, "repo    {}", quote_path(repo));
    }
    let state = match (status.running, status.pid, status.control) {
        (false, _, _) => "not running".to_owned(),
        (true, Some(pid), true) => format!("running (pid {pid})"),
        (true, Some(pid), false) => format!("running (pid {pid}; control socket not answering)"),
        (true, None, _) => "running".to_owned(),
    };
    let _ = writeln!(out, "status  {state}");
    if let Some(error) = &status.error {
        let _ = writeln!(out, "error   {}", quote(error));
    }
    if !status.ports.is_empty() {
        let _ = writeln!(out, "ports   {}", ports(&status.ports));
    }
    if let Some(containment) = &status.containment {
        let _ = writeln!(out, "contain {containment}");
    }
    if let Some(engine) = &status.db_engine {
        let _ = writeln!(out, "db      {engine} (`omnidev up --db`)");
    }
    for url in &status.urls {
        let _ = writeln!(out, "{:<7} {}", url.name, url.url);
    }
    for (name, link) in &status.links {
        let _ = writeln!(
            out,
            "link    {name} → {} ({}; {})",
            quote_path(&link.checkout),
            if link.running { "running" } else { "not running" },
            ports(&link.ports)
        );
    }
    if !status.services.is_empty() {
        let width = status.services.iter().map(|s| s.status.name.len()).max().unwrap_or(0);
        out.push_str("services\n");
        for s in &status.services {
            let restarts = match s.status.restarts {
                0 => String::new(),
                1 => " (1 restart)".to_owned(),
                n => format!(" ({n} restarts)"),
            };
            let used = s.usage.map(|u| format!("  [{}]", usage(&u))).unwrap_or_default();
            let _ = writeln!(out, "  {:<width$}  {}{restarts}{used}", s.status.name, s.detail);
        }
    }
    if let Some(total) = &status.usage {
        let _ = writeln!(out, "uses    {}", usage(total));
    }
    out
}

/// What processes hold, for people: `212.4 MiB, 3.1 s CPU, 2 processes`.
pub fn usage(usage: &omnidev_core::platform::Usage) -> String {
    format!(
        "{}, {}.{} s CPU, {} process{}",
        omnidev_core::platform::mib(usage.rss_bytes),
        usage.cpu_ms / 1000,
        usage.cpu_ms % 1000 / 100,
        usage.processes,
        if usage.processes == 1 { "" } else { "es" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_is_said_in_its_largest_whole_unit() {
        let said = |s: u64| ago(std::time::Duration::from_secs(s));
        assert_eq!(
            [said(0), said(59), said(60), said(3599), said(3600), said(86_399), said(86_400 * 3)],
            ["0s", "59s", "1m", "59m", "1h", "23h", "3d"]
        );
    }

    #[test]
    fn a_status_counts_restarts_in_words() {
        let report = |restarts| {
            let status = omnidev_core::ServiceStatus {
                restarts,
                ..omnidev_core::ServiceStatus::new("host", omnidev_core::ServiceState::Stopped)
            };
            crate::control::protocol::ServiceReport::new(status, None)
        };
        let status =
            PodStatus { services: vec![report(0), report(1), report(2)], ..PodStatus::default() };
        let text = pod_status(&status);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("host")).collect();
        assert_eq!(
            lines,
            ["  host  stopped", "  host  stopped (1 restart)", "  host  stopped (2 restarts)"]
        );
    }

    #[test]
    fn prefixes_pad_and_colour() {
        assert_eq!(prefix("db", 7, None), "db      | ");
        assert_eq!(prefix("db", 2, Some(SERVICE_STYLES[0])), "\x1b[36mdb\x1b[0m \x1b[2m|\x1b[0m ");
        assert_eq!(
            prefix("omnidev", 7, Some(SUPERVISOR_STYLE)),
            "\x1b[1momnidev\x1b[0m \x1b[2m|\x1b[0m "
        );
    }
}
