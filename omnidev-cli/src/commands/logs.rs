//! `omnidev logs [SERVICE…] [-f] [-n N] [--since-reload] [--json]`: print
//! (and follow) the pod's log files, `<pod>/logs/<service>.log`, as text or
//! as `log` event records.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::LogsArgs;
use crate::control::events::Encoder;
use crate::error::Error;
use crate::log_files::{
    Each, FileLine, LogReader, Tail, read_back, read_mark, read_new, selected, services_with_logs,
};
use crate::output::write_sanitised;

/// How often `-f` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Lines shown before following when `-n` is not given.
const FOLLOW_TAIL: usize = 10;

/// Output gathered before it is written.
const WRITE_EVERY: usize = 64 * 1024;

/// How lines are printed.
enum Form {
    /// `name | line`, sanitised for a terminal (colours kept when `colour`).
    Text { colour: bool },
    /// `log` event records (docs/events.md).
    Json(Encoder),
}

impl Form {
    fn push(&self, out: &mut String, source: &LogReader, line: &FileLine) {
        match self {
            Form::Text { colour } => {
                out.push_str(&source.prefix);
                out.push_str(&omnidev_core::text::sanitise(&line.text, *colour));
                out.push('\n');
            }
            Form::Json(encoder) => out.push_str(&omnidev_core::text::json_line(
                &encoder.file_line(&source.name, &line.text, line.at),
            )),
        }
    }
}

/// Runs `omnidev logs`.
pub fn run(args: &LogsArgs) -> miette::Result<ExitCode> {
    let pod_dir = crate::session::pod_dir(&args.pod)?;
    // A pod of another host keeps its files there: read there.
    if let Some(record) = crate::control::remote_record(&pod_dir)
        && matches!(crate::control::lock_state(&pod_dir)?, omnidev_pod::LockState::Held { .. })
    {
        let mut there: Vec<String> = Vec::new();
        there.extend(args.follow.then(|| "--follow".to_owned()));
        there.extend(args.lines.map(|n| format!("--lines={n}")));
        there.extend(args.since_reload.then(|| "--since-reload".to_owned()));
        there.extend(args.json.then(|| "--json".to_owned()));
        there.push("--".to_owned());
        there.extend(args.services.iter().cloned());
        return Ok(crate::remote::logs_there(&record, &there)?);
    }
    let dir = omnidev_pod::Pod::at(&pod_dir).logs_dir();
    let names = selected(&pod_dir, &args.services)?;
    let mark = args.since_reload.then(|| read_mark(&dir)).transpose()?;
    let form = if args.json {
        Form::Json(Encoder::new(&pod_dir))
    } else {
        Form::Text { colour: crate::output::colour_stdout() }
    };
    let prefixed = !args.json && names.len() != 1;
    let width = names.iter().map(String::len).max().unwrap_or(0);
    let prefix = |name: &str, width: usize| {
        if prefixed { crate::output::prefix(name, width, None) } else { String::new() }
    };
    let mut sources: Vec<LogReader> =
        names.iter().map(|name| LogReader::new(name, &dir, prefix(name, width))).collect();

    let default_tail = (args.follow && mark.is_none()).then_some(FOLLOW_TAIL);
    let tail = args.lines.or(default_tail).map(Tail::lines);
    print(&mut sources, &form, |source, each| read_back(source, mark.as_ref(), tail, each))?;
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let all = args.services.is_empty();
    follow(
        &mut sources,
        &pod_dir,
        &dir,
        &form,
        |name, width| all.then(|| prefix(name, width)),
        width,
    )
}

/// Prints the lines `read` gives of each source, written out in pieces of
/// [`WRITE_EVERY`] bytes.
fn print(
    sources: &mut [LogReader],
    form: &Form,
    mut read: impl FnMut(&mut LogReader, Each) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut out = String::new();
    for source in sources {
        read(source, &mut |source, line| {
            form.push(&mut out, source, &line);
            if out.len() > WRITE_EVERY {
                write_sanitised(&out)?;
                out.clear();
            }
            Ok(())
        })?;
    }
    write_sanitised(&out)
}

/// Prints lines appended to the files until interrupted or until the pod
/// stops (at once when it does not run), then says so on stderr and ends
/// with exit 0. A rotated file is read to its end before the new one is
/// opened; a truncated one is read from its start.
/// `joining` gives the prefix of a service whose file appears later, when
/// every service is followed.
fn follow(
    sources: &mut Vec<LogReader>,
    pod_dir: &Path,
    dir: &Path,
    form: &Form,
    joining: impl Fn(&str, usize) -> Option<String>,
    mut width: usize,
) -> miette::Result<ExitCode> {
    let running =
        || matches!(omnidev_pod::PodLock::state(pod_dir), Ok(omnidev_pod::LockState::Held { .. }));
    let print_new = |sources: &mut Vec<LogReader>| print(sources, form, read_new);
    if !running() {
        // What was written before it stopped is printed above.
        print_new(sources)?;
        note!("omnidev: the pod is not running: nothing more to follow (`omnidev up` starts it)");
        return Ok(ExitCode::SUCCESS);
    }
    let mut ticks = 0u32;
    loop {
        print_new(sources)?;
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(10) {
            if !running() {
                // One last look: the final lines of a stopping pod.
                print_new(sources)?;
                note!("omnidev: the pod stopped: done following");
                return Ok(ExitCode::SUCCESS);
            }
            // A service whose file appears later (e.g. vite after an
            // install) joins the combined view.
            for name in services_with_logs(dir)? {
                if sources.iter().any(|s| s.name == name) {
                    continue;
                }
                let Some(prefix) = joining(&name, width.max(name.len())) else {
                    break;
                };
                width = width.max(name.len());
                sources.push(LogReader::new(&name, dir, prefix));
            }
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    #[test]
    fn json_lines_are_log_records_dated_by_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        std::fs::write(&path, "GET / 200\n\u{1b}[31mboom\u{1b}[0m\n").expect("write");
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_048_318_123);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(at))
            .expect("set mtime");
        let mut src = LogReader::new("svc", dir.path(), String::new());
        let lines = crate::log_files::tests::collect(&mut src, None, None).expect("read");
        let form = Form::Json(Encoder::new(Path::new("/pod")));
        let mut out = String::new();
        for line in &lines {
            form.push(&mut out, &src, line);
        }
        assert_eq!(
            out,
            concat!(
                r#"{"v":2,"pod":"/pod","ts":"2026-11-30T14:18:38.123Z","service":"svc","kind":"log","stream":"merged","line":"GET / 200","seq":0}"#,
                "\n",
                r#"{"v":2,"pod":"/pod","ts":"2026-11-30T14:18:38.123Z","service":"svc","kind":"log","stream":"merged","line":"\u001b[31mboom\u001b[0m","seq":0}"#,
                "\n"
            )
        );
    }
}
