//! The CLI tests' context: the shared [`omnidev_test_support::TestContext`]
//! (a temp home and checkout) with the `omnidev` binary built for these
//! tests, run through `assert_cmd`, and insta filters for temp paths,
//! ports and pids.
#![allow(dead_code, clippy::missing_panics_doc, clippy::new_without_default)]

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use omnidev_test_support::process::Signal;

/// The shared context, with `omnidev` commands.
#[derive(Debug)]
pub struct TestContext(omnidev_test_support::TestContext);

impl std::ops::Deref for TestContext {
    type Target = omnidev_test_support::TestContext;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The `omnidev` binary these tests run.
pub fn omnidev_bin() -> &'static Path {
    assert_cmd::cargo::cargo_bin!("omnidev")
}

impl TestContext {
    /// A checkout whose pod has an SQLite database `lite` (its file in
    /// `DB` of the pod's environment) and a service, started in the
    /// background.
    pub fn sqlite_pod(&self) {
        self.write(
            "omnidev.toml",
            "[env]\nDB = \"{db.lite.path}\"\n\n[databases.lite]\nengine = \"sqlite\"\n\n\
             [services.web]\ncommand = [\"sleep\", \"300\"]\ngrace-ms = 1000\n",
        );
        self.run_ok(&["up", "--detach"]);
    }

    /// `sqlite3` on the [`Self::sqlite_pod`]'s database, by `omnidev
    /// run`; its output, trimmed.
    pub fn sqlite(&self, sql: &str) -> String {
        self.run_ok(&["run", "--", "sh", "-c", &format!("sqlite3 \"$DB\" '{sql}'")])
            .trim()
            .to_owned()
    }

    /// A context whose checkout (`repo/`) has a `.git` directory.
    pub fn new() -> Self {
        Self(omnidev_test_support::TestContext::new())
    }

    /// `omnidev` with a clean environment rooted in the temp dir, run in
    /// the checkout.
    pub fn command(&self) -> Command {
        self.0.command(omnidev_bin())
    }

    /// `omnidev` as an `assert_cmd` command (`.assert()`).
    pub fn cmd(&self) -> assert_cmd::Command {
        assert_cmd::Command::from_std(self.command())
    }

    /// insta settings with filters for hashes, pids and ports.
    pub fn settings() -> insta::Settings {
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(r"-[0-9a-f]{8}\b", "-[HASH8]");
        settings.add_filter(r"pid \d+", "pid [PID]");
        settings.add_filter(r"port \d+", "port [PORT]");
        settings.add_filter(r":\d{4,5}\b", ":[PORT]");
        settings.add_filter(r"omnidev \d+\.\d+\.\d+", "omnidev [VERSION]");
        settings
    }

    /// Runs `omnidev ARGS` to its end, for `assert_cmd`'s assertions on
    /// it (`.code(N)`, `.success()`, `.stdout(predicate)`); a failed one
    /// panics with the command, its exit code, stdout and stderr.
    pub fn assert(&self, args: &[&str]) -> assert_cmd::assert::Assert {
        self.cmd().args(args).assert()
    }

    /// Runs `omnidev ARGS` to its end without asserting anything: for
    /// cleanup that must not panic (a guard's `stop` in `drop`) and for
    /// conditions polled until they hold, where a failed attempt is not
    /// yet an error. Everything else asserts through [`Self::assert`].
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.command().args(args).output().expect("run omnidev")
    }

    /// Runs `omnidev ARGS`, which must exit 0; its stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        stdout(&self.assert(args).success())
    }

    /// Runs `omnidev ARGS`, which must exit 0 and print one JSON value
    /// (`status --json`, `restart --json`); that value.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.run_ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"))
    }

    /// The running pod's kept event records (`events --json`).
    pub fn records(&self) -> Vec<serde_json::Value> {
        (self.run_ok(&["events", "--json"]).lines())
            .map(|line| serde_json::from_str(line).expect("a record a line"))
            .collect()
    }

    /// A guard that runs `omnidev stop` in the checkout when dropped, so
    /// a failing test leaves no detached pod behind.
    pub fn stop_on_drop(&self) -> StopOnDrop<'_> {
        self.stop_on_drop_with(std::iter::empty::<&OsStr>())
    }

    /// [`Self::stop_on_drop`] of `omnidev stop ARGS` (`--repo DIR`,
    /// `--pod-dir DIR`: a pod other than the checkout's).
    pub fn stop_on_drop_with(
        &self,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> StopOnDrop<'_> {
        StopOnDrop { ctx: self, args: args.into_iter().map(|a| a.as_ref().to_owned()).collect() }
    }

    /// The first `key` (`usage`, `links`, `states`) the dashboard tells a
    /// page that follows the pod of `status` for which `until` holds.
    pub fn dashboard_told(
        &self,
        status: &serde_json::Value,
        key: &str,
        until: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        use std::io::{BufRead as _, Read as _, Write as _};
        let mut dashboard = self
            .command()
            .arg("dashboard")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("omnidev dashboard");
        let mut said = String::new();
        std::io::BufReader::new(dashboard.stdout.take().expect("stdout"))
            .read_line(&mut said)
            .expect("its URL");
        let (port, token) = (said.trim())
            .strip_prefix("dashboard http://127.0.0.1:")
            .and_then(|url| url.split_once("/?token="))
            .unwrap_or_else(|| panic!("{said}"));
        let pod = status["pod-dir"].as_str().expect("pod-dir").rsplit('/').next().expect("name");
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port")))
                .expect("connect");
        write!(
            stream,
            "GET /api/events?pod={pod}&token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )
        .expect("ask");
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
        let mut got = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        let told = loop {
            let n = stream.read(&mut chunk).expect("the stream within 30 s");
            assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&got);
            let found = (text.lines())
                .filter_map(|line| line.strip_prefix("data: "))
                .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
                .find_map(|value| value.get(key).filter(|v| !v.is_null() && until(v)).cloned());
            if let Some(told) = found {
                break told;
            }
        };
        let _ = dashboard.kill();
        let _ = dashboard.wait();
        told
    }

    /// Spawns `omnidev` in the background with piped output: a
    /// long-running child (a pod, a follower) that the test talks to,
    /// signals or stops while it runs, which `assert_cmd` (run to the
    /// end, then assert) does not fit.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn omnidev")
    }
}

/// Runs `omnidev stop ARGS` when dropped ([`TestContext::stop_on_drop`]);
/// what it says is not asserted (a drop must not panic).
#[derive(Debug)]
pub struct StopOnDrop<'a> {
    ctx: &'a TestContext,
    args: Vec<OsString>,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.ctx.command().arg("stop").args(&self.args).output();
    }
}

/// What an asserted command wrote to stdout.
pub fn stdout(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stdout).into_owned()
}

/// What an asserted command wrote to stderr.
pub fn stderr(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stderr).into_owned()
}

/// Polls `condition` until it holds or `deadline` passes
/// ([`omnidev_test_support::poll_until`]).
pub fn wait_for(what: &str, deadline: Duration, condition: impl FnMut() -> bool) {
    omnidev_test_support::poll_until(what, deadline, condition);
}

/// Whether a process with this pid runs (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    omnidev_test_support::process::is_alive(u32::try_from(pid).expect("a pid"))
}

/// Sends `signal` to the process `pid`.
pub fn signal(pid: u32, signal: Signal) {
    omnidev_test_support::process::signal(pid, signal);
}

pub fn read_pids(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok) {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                pids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    pids
}

/// Every path under `dir` except those under `skip`, with its type, mode
/// and contents (or link target).
pub fn listing(dir: &Path, skip: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.starts_with(skip) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        let mode = meta.mode() & 0o7777;
        let what = if meta.file_type().is_symlink() {
            format!("link {}", std::fs::read_link(&path).expect("readlink").display())
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                stack.push(entry.expect("entry").path());
            }
            format!("dir {mode:o}")
        } else {
            format!(
                "file {mode:o} {:?}",
                String::from_utf8_lossy(&std::fs::read(&path).expect("read"))
            )
        };
        out.insert(path, what);
    }
    out
}

/// The service `name` of a status (`status --json`, or any answer holding
/// one).
/// A profile of two services that start at once and run until stopped:
/// `api`, which says `api_says` at its start, and `web`; `extra` is
/// appended (more services, say).
pub fn api_and_web(api_says: &str, extra: &str) -> String {
    format!(
        r#"
[services.api]
command = ["sh", "-c", "echo api {api_says}; exec sleep 1000"]
grace-ms = 1000

[services.web]
command = ["sh", "-c", "echo web up; exec sleep 1000"]
grace-ms = 1000
{extra}"#
    )
}

/// The names of `record["services"]` (a status, an `ended` record), in
/// their order.
pub fn service_names(record: &serde_json::Value) -> Vec<&str> {
    record["services"]
        .as_array()
        .expect("services")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect()
}

pub fn service<'v>(status: &'v serde_json::Value, name: &str) -> &'v serde_json::Value {
    status["services"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no service {name} in {status}"))
}

/// The terminal of a command started with [`on_pty`]: its other end, and
/// what the command wrote to it.
#[derive(Debug)]
pub struct Terminal {
    /// The terminal's other end: what is written to it is typed.
    pub master: std::fs::File,
    written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Spawns `command` with its stdin, stdout and stderr on a new
/// pseudo-terminal of `size` (rows, columns; the default for `None`),
/// `TERM=xterm-256color` and colour on. A thread reads what it writes:
/// kept when `keep`, dropped otherwise (a long run's screens).
pub fn on_pty(mut command: Command, size: Option<(u16, u16)>, keep: bool) -> (Child, Terminal) {
    use std::io::Read as _;
    let size = size.map(|(rows, columns)| nix::pty::Winsize {
        ws_row: rows,
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    });
    let pty = nix::pty::openpty(size.as_ref(), None).expect("openpty");
    let terminal = std::fs::File::from(pty.slave);
    command
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color")
        .stdin(terminal.try_clone().expect("dup"))
        .stdout(terminal.try_clone().expect("dup"))
        .stderr(terminal);
    let child = command.spawn().expect("spawn on a pty");
    drop(command); // closes the parent's copies of the terminal
    let master = std::fs::File::from(pty.master);
    let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let written = written.clone();
        let mut master = master.try_clone().expect("dup");
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            // EIO once every copy of the terminal's other end is closed.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if keep {
                    written.lock().expect("lock").extend_from_slice(&buf[..n]);
                }
            }
        })
    };
    let terminal = Terminal { master, written, reader: Some(reader) };
    (child, terminal)
}

impl Terminal {
    /// Every byte written to the terminal so far.
    pub fn written(&self) -> Vec<u8> {
        self.written.lock().expect("lock").clone()
    }

    /// Every byte written to the terminal, once the command has exited:
    /// the reader has read to the end.
    pub fn into_written(mut self) -> Vec<u8> {
        drop(self.master);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("reader");
        }
        std::mem::take(&mut *self.written.lock().expect("lock"))
    }
}
