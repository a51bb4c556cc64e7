//! Reading a child's pipes on threads of their own and recording their
//! lines, without ever waiting for a reader.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{LineSplitter, LogStore};
use crate::event::Stream;
use crate::sync::Locked;

/// Pipe buffer asked for a service's stdout and stderr: 1 MiB, the default
/// ceiling (`/proc/sys/fs/pipe-max-size`) for unprivileged processes. It
/// holds about 10 ms of the fastest writer, so letting small writes gather
/// for [`GATHER`] never holds a service up. Linux only: macOS has no call
/// to ask for a bigger pipe (`F_SETPIPE_SZ`).
#[cfg(target_os = "linux")]
pub(crate) const PIPE_BYTES: i32 = 1024 * 1024;

/// How long the capture lets a burst of small writes gather before reading
/// again. A service writing a line per `write` (unbuffered Python, for
/// one) would otherwise cost a read, a log write and a wake-up per line.
const GATHER: Duration = Duration::from_millis(1);

/// Widens the pipe behind `fd` to `PIPE_BYTES` on Linux (best effort:
/// where the kernel refuses, the capture still works, reading more often).
fn widen_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: F_SETPIPE_SZ takes an int and touches no memory; the
        // descriptor is borrowed, so it is open for the call.
        unsafe {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// Reads the pipe `fd` to its end on a thread of its own, recording each
/// line of `service`; [`Capture::done`] resolves once the last line is
/// recorded. Never waits for readers (the history drops the oldest; a
/// [`Lossless`](crate::history::Lossless) reader spools to disk), so the
/// child's pipe is drained as fast as the files can be written.
///
/// The thread reads with blocking reads rather than through the runtime's
/// poller: a pipe wakes an `epoll` waiter on every write, so a service
/// writing a line per `write` would wake the runtime once a line even while
/// the capture lets output gather; a reader sleeping outside `read` is not
/// woken at all, and one blocked in `read` only when the pipe stops being
/// empty.
///
/// The pipe is widened first (`PIPE_BYTES`, on Linux).
pub(crate) fn spawn_capture(
    fd: std::os::fd::OwnedFd,
    store: Arc<LogStore>,
    service: &str,
    stream: Stream,
) -> io::Result<Capture> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::fd::AsFd as _;
    widen_pipe(fd.as_fd());
    let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
    fcntl(&fd, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    let pipe = Arc::new(Pipe {
        splitter: Mutex::new(LineSplitter::new(store.config().max_line_bytes)),
        store,
        service: service.to_owned(),
        stream,
    });
    let (done, finished) = tokio::sync::oneshot::channel();
    let reader = pipe.clone();
    std::thread::Builder::new().name("omnidev-capture".into()).spawn(move || {
        capture(std::fs::File::from(fd), &reader);
        let _ = done.send(());
    })?;
    Ok(Capture { done: finished, pipe })
}

/// The reader of one of a run's pipes, started by [`spawn_capture`].
#[derive(Debug)]
pub(crate) struct Capture {
    /// Resolves once the pipe's last line is recorded.
    pub(crate) done: tokio::sync::oneshot::Receiver<()>,
    pipe: Arc<Pipe>,
}

impl Capture {
    /// Records the pipe's unfinished line now, as a line of its own: for a
    /// pipe a process outside the run still holds open once the run has
    /// ended, so that the run's last words are recorded before its end is
    /// acted on. Output read later goes on as a new line.
    pub(crate) fn finish_unfinished(&self) {
        self.pipe.finish();
    }
}

/// One pipe's splitter, shared by its reader thread and its [`Capture`];
/// each step holds the splitter while it records, so lines are recorded
/// in the order they were split, and an unfinished line is never published
/// after it was finished.
#[derive(Debug)]
struct Pipe {
    splitter: Mutex<LineSplitter>,
    store: Arc<LogStore>,
    service: String,
    stream: Stream,
}

impl Pipe {
    /// Splits `data`, read at `now`, and records its lines.
    fn feed(&self, data: &[u8], now: Instant, batch: &mut Vec<String>) {
        let mut splitter = self.splitter.locked();
        splitter.feed(data, now, batch);
        let (cuts, lines) = (splitter.take_cuts(), batch.len());
        let mut spares = splitter.take_spares();
        self.store.push_batch_reusing(&self.service, self.stream, batch, &cuts, &mut spares);
        splitter.keep_spares(spares, lines);
    }

    fn partial_due(&self) -> Option<Instant> {
        self.splitter.locked().partial_due()
    }

    /// Publishes the unfinished line, if it is due at `now`.
    fn offer(&self, now: Instant) {
        let mut splitter = self.splitter.locked();
        if let Some(text) = splitter.take_partial(now) {
            self.store.push_partial(&self.service, self.stream, text);
        }
    }

    /// Records the unfinished line as a line.
    fn finish(&self) {
        let mut batch = Vec::new();
        let mut splitter = self.splitter.locked();
        splitter.finish(&mut batch);
        let cuts = splitter.take_cuts();
        self.store.push_batch(&self.service, self.stream, &mut batch, &cuts);
    }
}

/// Reads `reader` to its end, recording each line through `pipe`.
///
/// When reads come back short in quick succession (a service writing
/// many small pieces), the next read waits [`GATHER`] so the pieces arrive
/// together; a read after a quiet spell, or one that filled the buffer, is
/// followed at once.
///
/// An unfinished line is published as it stands once it has waited
/// [`PARTIAL_LINE_AFTER`] for its newline (the wait for more output is
/// then a `poll` with that deadline), and again at most that often while
/// it changes. At the end of the output it is recorded as a line, before
/// [`Capture::done`] resolves: a run's last words are recorded before its
/// end is acted on.
fn capture(reader: std::fs::File, pipe: &Pipe) {
    use std::os::fd::AsFd as _;
    let mut reader = reader;
    let mut buf = vec![0u8; 256 * 1024];
    let mut batch = Vec::new();
    let mut last_read: Option<Instant> = None;
    let mut gather = false;
    loop {
        if gather {
            std::thread::sleep(GATHER);
        }
        if let Some(due) = pipe.partial_due() {
            let wait = due.saturating_duration_since(Instant::now());
            match readable_within(reader.as_fd(), wait) {
                Some(true) => {}
                Some(false) => {
                    pipe.offer(Instant::now());
                    continue;
                }
                None => continue,
            }
        }
        let n = match io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let now = Instant::now();
        gather = n < buf.len() && last_read.is_some_and(|at| now.duration_since(at) < GATHER);
        last_read = Some(now);
        pipe.feed(&buf[..n], now, &mut batch);
    }
    pipe.finish();
}

/// Whether `fd` has something to read (or its end) within `wait`:
/// `Some(false)` when the wait passed, `None` when a signal cut it short.
/// Any other error is `Some(true)`: the read that follows reports it.
fn readable_within(fd: std::os::fd::BorrowedFd<'_>, wait: Duration) -> Option<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    // Rounded up, so a wait of less than a millisecond is not a busy loop.
    let millis = wait.as_micros().div_ceil(1000);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) => Some(false),
        Err(nix::errno::Errno::EINTR) => None,
        Ok(_) | Err(_) => Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LogConfig;

    /// What a log probe sees of `script`'s stdout, read through a real pipe
    /// by the capture: whether `pattern` matched, and the lines kept for
    /// display.
    fn probe_sees(pattern: &str, script: &str) -> (bool, Vec<String>) {
        let store = Arc::new(LogStore::new(LogConfig::default(), ["svc"], Arc::default()));
        let watch = Arc::new(crate::probe::LineWatch::new(pattern));
        store.watch_lines("svc", Some(watch.clone()));
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let out = std::os::fd::OwnedFd::from(child.stdout.take().expect("stdout"));
        let capture = spawn_capture(out, store.clone(), "svc", Stream::Stdout).expect("capture");
        capture.done.blocking_recv().expect("every line recorded");
        assert!(child.wait().expect("wait").success());
        let lines = store.kept_lines("svc");
        (watch.matched(), lines)
    }

    #[test]
    fn a_log_probe_sees_whole_lines_not_the_pieces_kept_for_display() {
        let piece = LogConfig::default().max_line_bytes;
        // Its first 64 KiB piece alone would match.
        let long = format!("print('x' * {piece} + 'x' * 100 + ' END', flush=True)");
        let (matched, lines) = probe_sees("^x+$", &long);
        assert!(!matched, "a piece of a longer line matched");
        assert_eq!(
            lines.iter().map(String::len).collect::<Vec<_>>(),
            [piece, 104],
            "still split for display"
        );
        // A whole long line matches, with a colour code the split cut in two
        // removed.
        let colour = format!(
            r"import sys; sys.stdout.write('x' * {} + '\x1b[31m' + 'x' * 100 + '\x1b[0m\n')",
            piece - 2
        );
        assert!(probe_sees("^x+$", &colour).0, "the whole line matches");
        // Past the bound a line never matches, whole or in pieces; the
        // next line does.
        let bound = crate::probe::LOG_PROBE_LINE_BYTES;
        let past = format!("print('x' * {}, flush=True); print('ready')", bound + 1);
        assert!(!probe_sees("^x+$", &past).0, "a line past the bound");
        assert!(probe_sees("^(x+|ready)$", &past).0, "the line after it");
    }
}
