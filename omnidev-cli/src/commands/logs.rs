//! `omnidev logs [SERVICE] [-f] [-n N]`: print (and follow) the pod's log
//! files, `<pod>/logs/<service>.log`.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::LogsArgs;
use crate::error::Error;
use crate::output::write_stdout;
use omnidev_pod::layout::{DETACHED_LOG, LOG_SUFFIX};

/// How often `-f` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Lines shown before following when `-n` is not given.
const FOLLOW_TAIL: usize = 10;

/// Bytes remembered from just before where reading stopped, to notice a
/// file truncated and regrown past that point between two polls.
const TAIL_CHECK: usize = 64;

/// How far past a missing rotated file (`.N` renamed while we look) the
/// search for older ones goes on.
const ROTATED_GAP: usize = 2;

/// One log file being read.
struct Source {
    name: String,
    path: PathBuf,
    prefix: String,
    file: Option<Open>,
    partial: Vec<u8>,
}

/// An open log file and how far it has been read.
struct Open {
    file: File,
    inode: u64,
    position: u64,
    /// The last bytes read (up to [`TAIL_CHECK`]).
    tail: Vec<u8>,
}

impl Open {
    fn new(file: File) -> Option<Self> {
        let inode = file.metadata().ok()?.ino();
        Some(Self {
            file,
            inode,
            position: 0,
            tail: Vec::new(),
        })
    }

    /// Appends to `bytes` what was written since the last read.
    fn read_new(&mut self, bytes: &mut Vec<u8>) {
        let start = bytes.len();
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = self.file.read_at(&mut chunk, self.position) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..n]);
            self.position += n as u64;
        }
        let new = &bytes[start..];
        if new.len() >= TAIL_CHECK {
            self.tail = new[new.len() - TAIL_CHECK..].to_vec();
        } else {
            self.tail.extend_from_slice(new);
            let excess = self.tail.len().saturating_sub(TAIL_CHECK);
            self.tail.drain(..excess);
        }
    }

    /// Whether the file was truncated in place since the last read: it is
    /// shorter than what was read, or the bytes just before where reading
    /// stopped changed (truncated and written again past that point).
    fn truncated(&self) -> bool {
        let Ok(meta) = self.file.metadata() else {
            return false;
        };
        if meta.len() < self.position {
            return true;
        }
        let mut now = vec![0u8; self.tail.len()];
        let from = self.position - self.tail.len() as u64;
        self.file
            .read_exact_at(&mut now, from)
            .is_ok_and(|()| now != self.tail)
    }
}

/// The files written after the one with inode `known`, oldest first, the
/// current `path` last: after a rotation (or several between two polls),
/// `known` is now `path.N`, and `path.N-1` … `path.1` and `path` are newer.
/// Files are opened newest first, so a rotation racing with the search
/// shows a file twice (skipped by inode) rather than not at all. Without a
/// `known` file (nothing open yet), only the current one.
fn newer_files(path: &Path, known: Option<u64>) -> Vec<Open> {
    let Some(current) = File::open(path).ok().and_then(Open::new) else {
        return Vec::new();
    };
    if known == Some(current.inode) {
        return Vec::new();
    }
    let mut found = vec![current];
    if let Some(known) = known {
        let mut missing = 0;
        for n in 1.. {
            let Some(open) = File::open(omnidev_core::logs::rotated_path(path, n))
                .ok()
                .and_then(Open::new)
            else {
                missing += 1;
                if missing > ROTATED_GAP {
                    break;
                }
                continue;
            };
            missing = 0;
            if open.inode == known {
                break;
            }
            if !found.iter().any(|f| f.inode == open.inode) {
                found.push(open);
            }
        }
    }
    found.reverse();
    found
}

/// Runs `omnidev logs`.
pub fn run(args: &LogsArgs) -> miette::Result<ExitCode> {
    let checkout = crate::session::resolve_checkout(&args.pod)?;
    let dir = omnidev_pod::Pod::at(&checkout.pod_dir).logs_dir();
    let available = services_with_logs(&dir);
    if let Some(name) = &args.service {
        omnidev_pod::names::check("service name", name)
            .map_err(|message| Error::BadName { message })?;
    }
    let names = match &args.service {
        Some(name) if available.contains(name) => vec![name.clone()],
        Some(name) => {
            return Err(Error::NoLog {
                service: name.clone(),
                dir,
                known: if available.is_empty() {
                    "none yet (start the pod with `omnidev up`)".to_owned()
                } else {
                    available.join(", ")
                },
            }
            .into());
        }
        None => available,
    };
    let width = names.iter().map(String::len).max().unwrap_or(0);
    let colour = crate::output::colour_stdout();
    let prefixed = args.service.is_none();
    let mut sources: Vec<Source> = names
        .iter()
        .map(|name| Source {
            name: name.clone(),
            path: dir.join(format!("{name}{LOG_SUFFIX}")),
            prefix: if prefixed {
                format!("{name:<width$} | ")
            } else {
                String::new()
            },
            file: None,
            partial: Vec::new(),
        })
        .collect();

    let tail = args.lines.or(args.follow.then_some(FOLLOW_TAIL));
    let mut out = String::new();
    for source in &mut sources {
        let mut current = Vec::new();
        if let Some(mut file) = File::open(&source.path).ok().and_then(Open::new) {
            file.read_new(&mut current);
            // Following goes on from exactly here; an unfinished last line
            // is completed by what comes next.
            let cut = current
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            source.partial = current.split_off(cut);
            source.file = Some(file);
        }
        for line in initial_lines(&source.path, &current, tail) {
            push_line(&mut out, &source.prefix, &line, colour);
        }
    }
    write_stdout(&out)?;
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    follow(
        &mut sources,
        &checkout.pod_dir,
        &dir,
        args.service.is_none(),
        width,
        colour,
    )
}

/// Services that have a log file, sorted by name (the detached pod's own
/// output, `omnidev.log`, is not a service).
fn services_with_logs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|name| name != DETACHED_LOG)
                .filter_map(|name| name.strip_suffix(LOG_SUFFIX).map(str::to_owned))
                .filter(|name| omnidev_pod::names::is_valid(name))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The lines to print first: all of `current` (the file's complete
/// lines), or its last `tail` lines, reaching into the newest rotated file
/// `<name>.log.1` when the current one has fewer.
fn initial_lines(path: &Path, current: &[u8], tail: Option<usize>) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(current)
        .lines()
        .map(str::to_owned)
        .collect();
    let Some(n) = tail else {
        return lines;
    };
    if lines.len() < n {
        let rotated = omnidev_core::logs::rotated_path(path, 1);
        if let Ok(older) = std::fs::read(&rotated) {
            let mut all: Vec<String> = String::from_utf8_lossy(&older)
                .lines()
                .map(str::to_owned)
                .collect();
            all.append(&mut lines);
            lines = all;
        }
    }
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

fn push_line(out: &mut String, prefix: &str, line: &str, colour: bool) {
    out.push_str(prefix);
    out.push_str(&crate::terminal_text::sanitise(line, colour));
    out.push('\n');
}

/// Prints lines appended to the files until interrupted or until the pod
/// (running when following began) stops. A rotated file is read to its end
/// before the new one is opened; a truncated one is read from its start.
fn follow(
    sources: &mut Vec<Source>,
    pod_dir: &Path,
    dir: &Path,
    all: bool,
    mut width: usize,
    colour: bool,
) -> miette::Result<ExitCode> {
    let running = || {
        matches!(
            omnidev_pod::PodLock::state(pod_dir),
            Ok(omnidev_pod::LockState::Held { .. })
        )
    };
    let was_running = running();
    let mut ticks = 0u32;
    loop {
        let mut out = String::new();
        for source in sources.iter_mut() {
            read_new(source, &mut out, colour);
        }
        write_stdout(&out)?;
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(10) {
            if was_running && !running() {
                // One last look: the final lines of a stopping pod.
                let mut out = String::new();
                for source in sources.iter_mut() {
                    read_new(source, &mut out, colour);
                }
                write_stdout(&out)?;
                return Ok(ExitCode::SUCCESS);
            }
            // A service whose file appears later (e.g. vite after an
            // install) joins the combined view.
            if all {
                for name in services_with_logs(dir) {
                    if !sources.iter().any(|s| s.name == name) {
                        width = width.max(name.len());
                        sources.push(Source {
                            prefix: format!("{name:<width$} | "),
                            path: dir.join(format!("{name}{LOG_SUFFIX}")),
                            name,
                            file: None,
                            partial: Vec::new(),
                        });
                    }
                }
            }
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// Appends the lines written since the last call: the rest of the open
/// file, then every file rotated in after it, in order; a file truncated in
/// place is read again from its start.
fn read_new(source: &mut Source, out: &mut String, colour: bool) {
    let mut bytes = Vec::new();
    if let Some(open) = &mut source.file {
        if open.truncated() {
            open.position = 0;
            open.tail.clear();
            source.partial.clear();
        }
        open.read_new(&mut bytes);
    }
    let replaced = std::fs::metadata(&source.path).is_ok_and(|meta| {
        source
            .file
            .as_ref()
            .is_none_or(|open| open.inode != meta.ino())
    });
    if replaced {
        let known = source.file.as_ref().map(|open| open.inode);
        for mut open in newer_files(&source.path, known) {
            open.read_new(&mut bytes);
            source.file = Some(open);
        }
    }
    if bytes.is_empty() {
        return;
    }
    source.partial.extend_from_slice(&bytes);
    if let Some(end) = source.partial.iter().rposition(|b| *b == b'\n') {
        let complete: Vec<u8> = source.partial.drain(..=end).collect();
        for line in String::from_utf8_lossy(&complete).lines() {
            push_line(out, &source.prefix, line, colour);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn source(path: &Path) -> Source {
        Source {
            name: "svc".into(),
            path: path.to_path_buf(),
            prefix: "svc | ".into(),
            file: None,
            partial: Vec::new(),
        }
    }

    /// Rotates like the supervisor's log writer: `.N` → `.N+1`, …, the
    /// file → `.1`, keeping `keep`.
    fn rotate(path: &Path, keep: usize) {
        use omnidev_core::logs::rotated_path;
        for n in (1..keep).rev() {
            let from = rotated_path(path, n);
            if from.exists() {
                std::fs::rename(&from, rotated_path(path, n + 1)).expect("rename");
            }
        }
        std::fs::rename(path, rotated_path(path, 1)).expect("rename");
    }

    #[test]
    fn follow_reads_every_line_once_across_two_rotations_between_polls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        append(&path, "1\n");
        read_new(&mut src, &mut out, false);
        append(&path, "2\n");
        rotate(&path, 3);
        append(&path, "3\n");
        rotate(&path, 3);
        append(&path, "4\n");
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | 1\nsvc | 2\nsvc | 3\nsvc | 4\n");
        // Three more before the next poll: the file read last is now `.3`.
        for n in 5..8 {
            append(&path, &format!("{n}\n"));
            rotate(&path, 3);
        }
        append(&path, "8\n");
        out.clear();
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | 5\nsvc | 6\nsvc | 7\nsvc | 8\n");
        out.clear();
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "", "nothing twice");
    }

    #[test]
    fn follow_notices_a_truncate_and_regrow_between_polls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        append(&path, "first line\nsecond line\n");
        read_new(&mut src, &mut out, false);
        // Truncated in place and written past the old length before the
        // next poll: the file is not shorter, but it is not the same.
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("truncate");
        append(&path, "a new first line\nand a second one\nand more\n");
        out.clear();
        read_new(&mut src, &mut out, false);
        assert_eq!(
            out,
            "svc | a new first line\nsvc | and a second one\nsvc | and more\n"
        );
    }

    fn append(path: &Path, text: &str) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open");
        file.write_all(text.as_bytes()).expect("write");
    }

    #[test]
    fn follow_reads_across_rotation_truncation_and_partial_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        let mut src = source(&path);
        let mut out = String::new();
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "", "no file yet");

        append(&path, "one\ntw");
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | one\n");
        append(&path, "o\n");
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | one\nsvc | two\n");

        // Rotation: the rest of the old file, then the new one.
        append(&path, "three\n");
        std::fs::rename(&path, omnidev_core::logs::rotated_path(&path, 1)).expect("rename");
        append(&path, "four\n");
        out.clear();
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | three\nsvc | four\n");

        // Truncation in place (seen as a file shorter than what was read):
        // read again from the start.
        std::fs::write(&path, "").expect("truncate");
        append(&path, "5\n");
        out.clear();
        read_new(&mut src, &mut out, false);
        assert_eq!(out, "svc | 5\n");
    }

    #[test]
    fn tail_reaches_into_the_rotated_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("svc.log");
        std::fs::write(omnidev_core::logs::rotated_path(&path, 1), "a\nb\nc\n").expect("write");
        assert_eq!(initial_lines(&path, b"d\ne\n", Some(3)), ["c", "d", "e"]);
        assert_eq!(initial_lines(&path, b"d\ne\n", None), ["d", "e"]);
        assert_eq!(initial_lines(&path, b"d\ne\n", Some(1)), ["e"]);
    }
}
