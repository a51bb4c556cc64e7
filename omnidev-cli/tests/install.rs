//! `omnidev install | update | check | refresh | shell-hook`, driven as a
//! user would: the real binary in a temp home, real git repositories, real
//! `uv`, and scripts standing in for programs only where a test must see
//! whether they were started.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use assert_cmd::assert::OutputAssertExt as _;
use omnidev_test_support::{git, write_script};
use predicates::prelude::*;
use predicates::str::contains;

/// `TIOCSCTTY` as `ioctl` takes it (a `c_uint` on macOS, whose `ioctl`
/// wants a `c_ulong`).
#[cfg(not(target_os = "macos"))]
const TIOCSCTTY: libc::Ioctl = libc::TIOCSCTTY;
#[cfg(target_os = "macos")]
const TIOCSCTTY: libc::c_ulong = libc::TIOCSCTTY as libc::c_ulong;

const OLD: &str = "1111111111111111111111111111111111111111";
const NEW: &str = "2222222222222222222222222222222222222222";
const NEWER: &str = "3333333333333333333333333333333333333333";

/// A temp home: config, cache, uv dirs, and a `bin/` of recording fakes.
struct Context {
    root: tempfile::TempDir,
}

impl Context {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        for dir in ["home", "config", "cache", "bin", "markers"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("dirs");
        }
        Self { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn cache_file(&self) -> PathBuf {
        self.path("cache/omnidev/omnigent-check.json")
    }

    fn install_toml(&self) -> PathBuf {
        self.path("config/omnidev/install.toml")
    }

    /// `omnidev ARGS` with the temp home and the real PATH.
    fn omnidev(&self, args: &[&str]) -> Command {
        self.command(env!("CARGO_BIN_EXE_omnidev"), args)
    }

    /// `program ARGS` with the temp home and the real PATH.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            // Keep the machine's environment (CA bundles, proxies) but none
            // of the variables this crate reacts to.
            .env_remove("OMNIDEV_NO_UPDATE_CHECK")
            .env_remove("OMNIDEV_SKIP_WEB_CHECK")
            .env_remove("OMNIDEV_REFRESH_EXE")
            .env_remove("OMNIDEV_REFRESH_LOCK_FD")
            .env_remove("OMNIDEV_GITHUB_API_URL")
            .env_remove("GIT_DIR")
            .env_remove("GIT_CONFIG_COUNT")
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("UV_TOOL_DIR", self.path("uv/tools"))
            .env("UV_TOOL_BIN_DIR", self.path("uv/bin"))
            .env("UV_CACHE_DIR", self.path("uv/cache"))
            .env("UV_PYTHON_DOWNLOADS", "never")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    /// `omnidev ARGS` with PATH holding only recording fakes of `uv`, `git`,
    /// `node`, `npm` and `omnidev`, and the background refresh pointed at
    /// the fake `omnidev`: any process the command starts leaves a marker.
    fn omnidev_isolated(&self, args: &[&str]) -> Command {
        for program in ["uv", "git", "node", "npm", "omnidev"] {
            if !self.path("bin").join(program).exists() {
                self.fake(program, "");
            }
        }
        let mut command = self.omnidev(args);
        command.env("PATH", self.path("bin")).env("OMNIDEV_REFRESH_EXE", self.path("bin/omnidev"));
        command
    }

    /// [`Self::omnidev_isolated`] run to its end, which must exit 0; its
    /// output.
    fn isolated_ok(&self, args: &[&str]) -> Output {
        self.omnidev_isolated(args).assert().success().get_output().clone()
    }

    /// [`Self::omnidev_isolated`] run to its end, which must exit `code`;
    /// its output.
    fn isolated_code(&self, args: &[&str], code: i32) -> Output {
        self.omnidev_isolated(args).assert().code(code).get_output().clone()
    }

    /// A fake `program` in `bin/` that records its arguments in
    /// `markers/<program>` and then runs `body`.
    fn fake(&self, program: &str, body: &str) {
        let marker = self.path("markers").join(program);
        write_script(
            &self.path("bin").join(program),
            &format!("echo \"$*\" >> '{}'\n{body}", marker.display()),
        );
    }

    fn markers(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path("markers"))
            .expect("markers")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn marker_lines(&self, program: &str) -> Vec<String> {
        std::fs::read_to_string(self.path("markers").join(program))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn write_cache(&self, checked_at: u64, installed: &str, remote: &str, declined: Option<&str>) {
        let json = serde_json::json!({
            "checked_at": checked_at,
            "repo": "https://github.com/omnigent-ai/omnigent.git",
            "ref": "main",
            "remote_commit": remote,
            "installed_commit": installed,
            "declined_commit": declined,
        });
        std::fs::create_dir_all(self.cache_file().parent().expect("parent")).expect("dir");
        std::fs::write(self.cache_file(), json.to_string()).expect("write cache");
    }

    fn cache(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.cache_file()).expect("read cache");
        serde_json::from_str(&text).expect("cache is valid JSON")
    }

    fn write_install_toml(&self, repo: &str) {
        std::fs::create_dir_all(self.install_toml().parent().expect("parent")).expect("dir");
        std::fs::write(
            self.install_toml(),
            format!("repo = \"{repo}\"\nref = \"main\"\nextras = []\npython = \"3.12\"\n"),
        )
        .expect("write install.toml");
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

/// Runs `command` to its end for a test that reads the outcome itself:
/// the programs around omnidev (uv, git, the shells), and omnidev where the
/// exit code is not asserted or is one of several. omnidev with an expected
/// exit goes through `assert_cmd` (`.assert().success()` / `.code(N)`).
fn run(command: &mut Command) -> Output {
    command.output().expect("run omnidev")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn wait_for(what: &str, condition: impl FnMut() -> bool) {
    omnidev_test_support::poll_until(what, Duration::from_secs(20), condition);
}

/// A bare repository holding a tiny Python package `omnigent`, plus the
/// work tree that pushes to it. Returns (file:// URL, work tree).
fn package_repo(root: &Path) -> (String, PathBuf) {
    let bare = root.join("omnigent.git");
    let work = root.join("omnigent-work");
    std::fs::create_dir_all(work.join("omnigent")).expect("dirs");
    git(root, &["init", "--bare", "-q", bare.to_str().expect("utf8")]);
    git(&work, &["init", "-q"]);
    std::fs::write(
        work.join("pyproject.toml"),
        "[project]\nname = \"omnigent\"\nversion = \"0.1.0\"\nrequires-python = \">=3.8\"\n\n\
         [project.scripts]\nomnigent = \"omnigent:main\"\n\n\
         [build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n",
    )
    .expect("pyproject");
    std::fs::write(
        work.join("omnigent/__init__.py"),
        "def main():\n    print(\"omnigent test package\")\n",
    )
    .expect("module");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "first"]);
    let url = format!("file://{}", bare.display());
    git(&work, &["push", "-q", &url, "main"]);
    (url, work)
}

fn commit_and_push(work: &Path, url: &str, content: &str) -> String {
    std::fs::write(work.join("omnigent/version.txt"), content).expect("write");
    git(work, &["add", "."]);
    git(work, &["commit", "-qm", content]);
    git(work, &["push", "-q", url, "main"]);
    git(work, &["rev-parse", "HEAD"])
}

// ---------------------------------------------------------------------------
// The hot path

#[test]
fn check_with_fresh_cache_starts_no_process() {
    let cx = Context::new();
    cx.write_cache(now(), OLD, OLD, None);
    let output = cx.isolated_ok(&["check", "--quiet"]);
    assert_eq!(text(&output.stdout), "");
    assert_eq!(text(&output.stderr), "", "--quiet prints nothing when up to date");

    // An update on offer is told, still without starting anything.
    cx.write_cache(now(), OLD, NEW, None);
    let output = cx.isolated_ok(&["check", "--quiet"]);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("a newer omnigent is available on main: 111111111111 -> 222222222222"),
        "{stderr}"
    );
    assert!(stderr.contains("omnidev update"), "{stderr}");

    cx.omnidev_isolated(&["check"]).assert().success();
    assert_eq!(cx.markers(), Vec::<String>::new(), "no process was started");
}

#[test]
fn ten_checks_on_a_stale_cache_start_exactly_one_detached_refresh() {
    let cx = Context::new();
    cx.write_cache(now() - 25 * 60 * 60, OLD, OLD, None);
    let release = cx.path("release");
    // The fake refresh records its stdin (to prove it is detached) and holds
    // the inherited lock until the test releases it — or for at most 60 s,
    // so a failed test never leaves it behind.
    let body = format!(
        "PATH=/usr/bin:/bin\nreadlink /proc/$$/fd/0 >> '{stdin}'\nfor _ in $(seq 1200); do [ -e '{release}' ] && break; sleep 0.05; done\n: > '{finished}'\n",
        stdin = cx.path("refresh-stdin").display(),
        release = release.display(),
        finished = cx.path("refresh-finished").display(),
    );
    cx.fake("omnidev", &body);
    let mut checks: Vec<_> = (0..10)
        .map(|_| {
            let mut command = cx.omnidev_isolated(&["check", "--quiet"]);
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            command.spawn().expect("spawn check")
        })
        .collect();
    for child in &mut checks {
        let status = child.wait().expect("wait");
        assert!(status.success());
    }
    wait_for("the refresh to start", || !cx.marker_lines("omnidev").is_empty());
    // One more check while the refresh runs: still no second one.
    assert!(run(&mut cx.omnidev_isolated(&["check", "--quiet"])).status.success());
    assert_eq!(cx.marker_lines("omnidev"), ["refresh"], "exactly one refresh");
    wait_for("the refresh to report its stdin", || cx.path("refresh-stdin").exists());
    let stdin = std::fs::read_to_string(cx.path("refresh-stdin")).expect("stdin");
    assert_eq!(stdin.trim(), "/dev/null", "the refresh is detached from the terminal");
    assert_eq!(cx.markers(), ["omnidev"], "nothing but the refresh ran");
    std::fs::write(&release, "").expect("release");
    wait_for("the refresh to finish", || cx.path("refresh-finished").exists());
}

#[test]
fn missing_or_corrupt_cache_starts_a_refresh() {
    let cx = Context::new();
    let output = cx.isolated_ok(&["check"]);
    assert!(text(&output.stderr).contains("checking in the background"), "{output:?}");
    wait_for("the refresh", || cx.marker_lines("omnidev") == ["refresh"]);

    let cx = Context::new();
    std::fs::create_dir_all(cx.cache_file().parent().expect("parent")).expect("dir");
    std::fs::write(cx.cache_file(), "{\"checked_at\": tru").expect("corrupt");
    cx.omnidev_isolated(&["check", "--quiet"]).assert().success();
    wait_for("the refresh", || cx.marker_lines("omnidev") == ["refresh"]);
}

#[test]
fn quiet_check_says_at_most_a_line_and_plain_check_names_the_fault() {
    // A cache directory that cannot be made (a file is in its way; a
    // read-only directory would not stop root): the refresh cannot start.
    let cx = Context::new();
    let dir = cx.cache_file().parent().expect("parent").to_owned();
    std::fs::write(&dir, "not a directory").expect("block the cache dir");
    let quiet = cx.isolated_ok(&["check", "--quiet"]);
    assert!(
        text(&quiet.stderr).lines().count() <= 1,
        "the shell hook says at most one line: {quiet:?}"
    );
    assert_eq!(text(&quiet.stdout), "");
    // Plain check names the directory.
    cx.omnidev_isolated(&["check"]).assert().failure().stderr(contains(dir.display().to_string()));
    assert_eq!(std::fs::read_to_string(&dir).expect("kept"), "not a directory");

    // A corrupt install.toml: the shell hook says its one line naming the
    // file, once a day (however fresh the cache); plain `check` names it
    // every time.
    let cx = Context::new();
    cx.write_cache(now(), OLD, OLD, None);
    std::fs::create_dir_all(cx.install_toml().parent().expect("parent")).expect("dir");
    std::fs::write(cx.install_toml(), "repo = [broken").expect("corrupt");
    let tmp = cx.path("tmp");
    std::fs::create_dir_all(&tmp).expect("dir");
    let hook = || {
        let mut command = cx.omnidev_isolated(&["check", "--quiet"]);
        run(command.env("TMPDIR", &tmp))
    };
    let quiet = hook();
    assert!(quiet.status.success(), "{quiet:?}");
    let said = text(&quiet.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("the update check failed"), "{said}");
    assert!(said.contains("install.toml"), "{said}");
    let again = hook();
    assert!(again.status.success(), "{again:?}");
    assert_eq!(text(&again.stderr), "", "told once a day: {again:?}");
    cx.omnidev_isolated(&["check"])
        .assert()
        .failure()
        .stderr(contains("install.toml").and(contains("not installed").not()));
    assert_eq!(std::fs::read_to_string(cx.install_toml()).expect("kept"), "repo = [broken");
}

#[test]
fn no_update_check_variable_turns_check_off() {
    let cx = Context::new();
    cx.write_cache(0, OLD, NEW, None);
    let output = cx
        .omnidev_isolated(&["check"])
        .env("OMNIDEV_NO_UPDATE_CHECK", "1")
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(text(&output.stderr), "");
    assert_eq!(cx.markers(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// The prompt

/// A shell command running as the session leader of a new
/// pseudo-terminal (its controlling terminal, so `/dev/tty` is it), as in
/// a new terminal tab.
struct Terminal {
    master: std::fs::File,
    shown: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    child: std::process::Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Starts `sh -c script` (with the environment of `command`) after
    /// `typed` is already waiting in the terminal's input.
    fn start(command: &Command, script: &str, typed: &[u8]) -> Self {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let mut master = std::fs::File::from(pty.master);
        master.write_all(typed).expect("type ahead");
        let slave = std::fs::File::from(pty.slave);
        let mut shell = Command::new("/bin/sh");
        shell
            .args(["-c", script])
            .envs(command.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
            .env("OMNIDEV", command.get_program())
            .stdin(slave.try_clone().expect("dup"))
            .stdout(slave.try_clone().expect("dup"))
            .stderr(slave);
        // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the
        // terminal.
        unsafe {
            shell.pre_exec(|| {
                if libc::setsid() == -1 || libc::ioctl(0, TIOCSCTTY, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = shell.spawn().expect("spawn sh");
        drop(shell); // the parent's copies of the terminal
        let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = {
            let shown = shown.clone();
            let mut master = master.try_clone().expect("dup");
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                // EIO once the terminal's other side is closed.
                while let Ok(n) = master.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    shown.lock().expect("lock").extend_from_slice(&buf[..n]);
                }
            })
        };
        Self { master, shown, child, reader: Some(reader) }
    }

    fn shown(&self) -> String {
        text(&self.shown.lock().expect("lock"))
    }

    fn wait_shown(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.shown().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {needle:?}; the terminal shows {:?}",
                self.shown()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn type_in(&mut self, keys: &[u8]) {
        self.master.write_all(keys).expect("type");
    }

    /// Waits for the shell to exit; returns whether it succeeded and
    /// everything the terminal showed.
    fn finish(mut self) -> (bool, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "did not end: {:?}", self.shown());
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().expect("reader");
        }
        (status.success(), self.shown())
    }
}

/// Runs `omnidev check --quiet` on a terminal and, once it asks, types
/// `answer` (which may be a lone Ctrl-D: end of input).
fn check_on_terminal(cx: &Context, answer: &str) -> (bool, String) {
    let mut command = cx.omnidev_isolated(&[]);
    // The fakes stay first; their scripts need the usual tools.
    command.env("PATH", format!("{}:/usr/bin:/bin", cx.path("bin").display()));
    let mut terminal = Terminal::start(&command, "\"$OMNIDEV\" check --quiet", b"");
    terminal.wait_shown("Update omnigent now? [y/N]");
    terminal.type_in(answer.as_bytes());
    terminal.finish()
}

#[test]
fn input_typed_before_the_check_reaches_the_shell_and_declines_nothing() {
    let cx = Context::new();
    cx.write_cache(now(), OLD, NEW, None);
    // A whole line, and the start of the next one, typed into a new tab
    // while the rc file runs.
    let mut terminal = Terminal::start(
        &cx.omnidev_isolated(&[]),
        "\"$OMNIDEV\" check --quiet; echo checked; \
         IFS= read -r one; IFS= read -r two; echo \"shell got [$one] [$two]\"",
        b"echo hello > f\necho hel",
    );
    terminal.wait_shown("checked");
    terminal.type_in(b"lo\n");
    let (ok, shown) = terminal.finish();
    assert!(ok, "{shown}");
    assert!(shown.contains("shell got [echo hello > f] [echo hello]"), "{shown}");
    assert!(!shown.contains("Update omnigent now?"), "{shown}");
    assert!(
        shown.contains("run `omnidev update` to install it"),
        "the one-line notice instead: {shown}"
    );
    assert_eq!(cx.cache()["declined_commit"], serde_json::Value::Null);
    assert_eq!(cx.markers(), Vec::<String>::new());
}

#[test]
fn end_of_input_or_an_empty_answer_asks_again_next_time() {
    let cx = Context::new();
    cx.write_cache(now(), OLD, NEW, None);
    for answer in ["\u{4}", "\n", "later\n"] {
        let (ok, shown) = check_on_terminal(&cx, answer);
        assert!(ok, "{shown}");
        assert!(shown.contains("asking again next time"), "{answer:?}: {shown}");
        assert_eq!(
            cx.cache()["declined_commit"],
            serde_json::Value::Null,
            "{answer:?} declines nothing"
        );
    }
    let output = run(&mut cx.omnidev_isolated(&["check", "--quiet"]));
    assert!(text(&output.stderr).contains("-> 222222222222"), "still offered: {output:?}");
}

#[test]
fn a_failing_hook_check_is_one_line_once_a_day() {
    let cx = Context::new();
    // HOME unusable (a file: no directory can be made in it, not even by
    // root): the refresh cannot even be started.
    let locked = cx.path("locked");
    std::fs::write(&locked, "not a directory").expect("file");
    let tmp = cx.path("tmp");
    std::fs::create_dir_all(&tmp).expect("dir");
    let hook = || {
        let mut command = cx.omnidev_isolated(&["check", "--quiet"]);
        command
            .env("HOME", &locked)
            .env("XDG_CACHE_HOME", locked.join("cache"))
            .env("XDG_CONFIG_HOME", locked.join("config"))
            .env("TMPDIR", &tmp);
        run(&mut command)
    };
    let first = hook();
    assert!(first.status.success(), "{first:?}");
    let said = text(&first.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("the update check failed"), "{said}");
    assert!(said.contains(&locked.display().to_string()), "{said}");
    for _ in 0..3 {
        let again = hook();
        assert!(again.status.success(), "{again:?}");
        assert_eq!(text(&again.stderr), "", "told once a day");
    }
    // `check` without --quiet (a person asking) always says why.
    let mut asked = cx.omnidev_isolated(&["check"]);
    asked.env("HOME", &locked).env("XDG_CACHE_HOME", locked.join("cache")).env("TMPDIR", &tmp);
    let asked = run(&mut asked);
    assert!(!asked.status.success());
    assert!(!text(&asked.stderr).is_empty());
}

/// The hook's once-a-day notice is kept per cache root and per fault: a
/// corrupt `install.toml` of one home and an unusable other home, sharing
/// one temp dir, are each told once; a new fault of the first is told too.
#[test]
fn two_faults_of_two_cache_roots_are_each_told_once() {
    let tmp = tempfile::tempdir().expect("shared temp dir");
    let corrupt = Context::new();
    corrupt.write_cache(now(), OLD, OLD, None);
    std::fs::create_dir_all(corrupt.install_toml().parent().expect("parent")).expect("dir");
    std::fs::write(corrupt.install_toml(), "repo = [broken").expect("corrupt");
    let unusable = Context::new();
    let locked = unusable.path("locked");
    std::fs::write(&locked, "not a directory").expect("file");
    let hook = |cx: &Context, home: Option<&Path>| {
        let mut command = cx.omnidev_isolated(&["check", "--quiet"]);
        command.env("TMPDIR", tmp.path());
        if let Some(home) = home {
            command
                .env("HOME", home)
                .env("XDG_CACHE_HOME", home.join("cache"))
                .env("XDG_CONFIG_HOME", home.join("config"));
        }
        let output = run(&mut command);
        assert!(output.status.success(), "{output:?}");
        text(&output.stderr)
    };
    let told = |said: String, naming: &str| {
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(said.contains("the update check failed") && said.contains(naming), "{said}");
    };
    told(hook(&corrupt, None), "install.toml");
    told(hook(&unusable, Some(&locked)), &locked.display().to_string());
    for _ in 0..2 {
        assert_eq!(hook(&corrupt, None), "", "told once a day");
        assert_eq!(hook(&unusable, Some(&locked)), "", "told once a day");
    }
    // Another fault of the same cache root is told, once.
    std::fs::write(corrupt.install_toml(), "unknown-key = 1\n").expect("another fault");
    let said = hook(&corrupt, None);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert_eq!(hook(&corrupt, None), "", "told once a day");
}

#[test]
fn declined_update_is_not_offered_again_but_a_newer_one_is() {
    let cx = Context::new();
    cx.write_cache(now(), OLD, NEW, None);
    let (ok, shown) = check_on_terminal(&cx, "n\n");
    assert!(ok, "{shown}");
    assert!(shown.contains("will not be offered again"), "{shown}");
    assert_eq!(cx.cache()["declined_commit"], NEW);

    let output = run(&mut cx.omnidev_isolated(&["check", "--quiet"]));
    assert_eq!(text(&output.stderr), "", "the declined commit is not offered again");
    // Asked plainly, check does not call it up to date.
    let output = run(&mut cx.omnidev_isolated(&["check"]));
    assert_eq!(
        text(&output.stderr).trim(),
        "omnidev: omnigent 222222222222 is available (declined; run `omnidev update` to install it)",
        "{output:?}"
    );

    let mut cache = cx.cache();
    cache["remote_commit"] = serde_json::json!(NEWER);
    std::fs::write(cx.cache_file(), cache.to_string()).expect("write");
    let output = run(&mut cx.omnidev_isolated(&["check", "--quiet"]));
    assert!(
        text(&output.stderr).contains("-> 333333333333"),
        "a newer commit is offered: {output:?}"
    );
    assert_eq!(cx.markers(), Vec::<String>::new());
}

/// uv at the process seam: `uv tool install` "installs" commit NEW's
/// metadata where `uv tool dir` says tools live.
fn fake_uv_installing_new(cx: &Context) {
    let tools = cx.path("uv-tools");
    let dist_info = tools.join("omnigent/lib/python3.12/site-packages/omnigent-0.1.0.dist-info");
    cx.fake(
        "uv",
        &format!(
            "case \"$1 $2\" in\n\
             'tool dir') echo '{tools}' ;;\n\
             'tool install') mkdir -p '{dist}' && echo '{{\"url\":\"git+x\",\"vcs_info\":{{\"vcs\":\"git\",\"commit_id\":\"{NEW}\"}}}}' > '{dist}/direct_url.json' ;;\n\
             esac\n",
            tools = tools.display(),
            dist = dist_info.display(),
        ),
    );
}

#[test]
fn skip_web_check_on_update_and_remembered_from_install() {
    let cx = Context::new();
    fake_uv_installing_new(&cx);
    cx.fake("node", "echo v20.0.0\n");
    // The fakes first, then the system's tools (the fake uv uses mkdir).
    let isolated = |args: &[&str]| {
        let mut command = cx.omnidev_isolated(args);
        command.env("PATH", format!("{}:/usr/bin:/bin", cx.path("bin").display()));
        command
    };
    let output = isolated(&["update"]).assert().code(1).get_output().clone();
    assert!(text(&output.stderr).contains("--skip-web-check"), "{output:?}");
    assert!(cx.marker_lines("uv").is_empty(), "uv did not run");
    // The flag the message names exists on update.
    isolated(&["update", "--skip-web-check"]).assert().success();
    assert_eq!(cx.marker_lines("uv").len(), 2, "tool install, then tool dir");

    // install --skip-web-check is saved, and update honours it.
    isolated(&["install", "--skip-web-check"]).assert().success();
    let saved = std::fs::read_to_string(cx.install_toml()).expect("install.toml");
    assert!(saved.contains("skip-web-check = true"), "{saved}");
    isolated(&["update"]).assert().success();
    // A plain install forgets it again.
    cx.fake("node", "echo v22.11.0\n");
    isolated(&["install"]).assert().success();
    let saved = std::fs::read_to_string(cx.install_toml()).expect("install.toml");
    assert!(!saved.contains("skip-web-check"), "{saved}");
}

#[test]
fn accepting_the_prompt_runs_update() {
    let cx = Context::new();
    cx.write_cache(now(), OLD, NEW, None);
    fake_uv_installing_new(&cx);
    cx.fake("node", "echo v22.11.0\n");
    let (ok, shown) = check_on_terminal(&cx, "y\n");
    assert!(ok, "{shown}");
    let uv_calls = cx.marker_lines("uv");
    assert!(
        uv_calls.iter().any(|call| call.starts_with("tool install --force --reinstall")
            && call.ends_with(
                "-- omnigent[databricks] @ git+https://github.com/omnigent-ai/omnigent.git@main"
            )),
        "update reinstalls the saved (default) choice: {uv_calls:?}"
    );
    assert_eq!(cx.cache()["installed_commit"], NEW, "the new commit is recorded");
    let output = run(&mut cx.omnidev_isolated(&["check", "--quiet"]));
    assert_eq!(text(&output.stderr), "", "up to date after the update");
}

// ---------------------------------------------------------------------------
// Safety and preflight

#[test]
fn unsafe_repo_and_ref_are_rejected_before_anything_runs() {
    let cx = Context::new();
    let touched = cx.path("x");
    let upload_pack = format!("--upload-pack=touch {}", touched.display());
    let ext = format!("ext::sh -c touch% {}", touched.display());
    let cases: Vec<Vec<String>> = vec![
        vec!["--git".into(), upload_pack.clone()],
        vec![format!("--git={upload_pack}")],
        vec!["--ref".into(), "-x".into()],
        vec!["--ref=--upload-pack=touch".into()],
        vec!["--git".into(), ext],
        vec!["--git".into(), "fd::3".into()],
    ];
    for args in cases {
        let mut all = vec!["install", "--skip-web-check"];
        all.extend(args.iter().map(String::as_str));
        let output = cx.isolated_code(&all, 1);
        let stderr = text(&output.stderr);
        assert!(stderr.contains("refusing"), "{args:?}: {stderr}");
    }
    assert!(!touched.exists());
    assert_eq!(cx.markers(), Vec::<String>::new(), "no process ran");
    assert!(!cx.path("config/omnidev").exists(), "nothing was created");
    assert!(!cx.path("cache/omnidev").exists(), "nothing was created");
}

#[test]
fn preflight_names_what_is_missing() {
    let cx = Context::new();
    cx.fake("node", "echo v20.0.0");
    let output = cx.isolated_code(&["install"], 1);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("Node v20.0.0 is too old"), "{stderr}");
    assert!(stderr.contains("OMNIDEV_SKIP_WEB_CHECK"), "{stderr}");
    assert!(cx.marker_lines("uv").is_empty(), "uv did not run");
    assert!(!cx.install_toml().exists(), "nothing saved");

    cx.fake("node", "echo v22.11.0");
    std::fs::remove_file(cx.path("bin/npm")).expect("remove npm");
    let output = run(cx.omnidev(&["install"]).env("PATH", cx.path("bin")));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("`npm` was not found on PATH"), "{stderr}");
    assert!(stderr.contains("pnpm"), "{stderr}");

    std::fs::remove_file(cx.path("bin/uv")).expect("remove uv");
    let mut command = cx.omnidev(&["install"]);
    command.env("PATH", cx.path("bin"));
    let output = run(&mut command);
    assert!(text(&output.stderr).contains("`uv` was not found on PATH"), "{output:?}");
}

#[test]
fn install_runs_uv_with_the_spec() {
    let cx = Context::new();
    cx.fake("uv", "exit 3");
    let mut command = cx.omnidev_isolated(&["install", "--extra", "dev"]);
    command.env("OMNIDEV_SKIP_WEB_CHECK", "1");
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(text(&output.stderr).contains("failed"), "{output:?}");
    assert_eq!(
        cx.marker_lines("uv"),
        [
            "tool install --force --python 3.12 -- omnigent[databricks,dev] @ git+https://github.com/omnigent-ai/omnigent.git@main"
        ]
    );
    assert!(!cx.install_toml().exists(), "a failed uv saves no choice");
}

/// A fake `uv` whose `tool install` starts a helper (as uv starts git and
/// builds), appends "<its pid> <helper pid>" to `uv-pids`, waits for the
/// file `release`, then "installs" commit `$FAKE_COMMIT` where `tool dir`
/// says tools live.
fn slow_uv(cx: &Context) {
    let tools = cx.path("uv-tools");
    let dist = tools.join("omnigent/lib/python3.12/site-packages/omnigent-0.1.0.dist-info");
    cx.fake(
        "uv",
        &format!(
            "case \"$1 $2\" in\n\
             'tool dir') echo '{tools}' ;;\n\
             'tool install')\n\
               sleep 300 &\n\
               echo \"$$ $!\" >> '{pids}'\n\
               while [ ! -e '{release}' ]; do sleep 0.05; done\n\
               kill $!\n\
               mkdir -p '{dist}' && echo \"{{\\\"url\\\":\\\"git+x\\\",\\\"vcs_info\\\":{{\\\"vcs\\\":\\\"git\\\",\\\"commit_id\\\":\\\"$FAKE_COMMIT\\\"}}}}\" > '{dist}/direct_url.json' ;;\n\
             esac\n",
            tools = tools.display(),
            dist = dist.display(),
            pids = cx.path("uv-pids").display(),
            release = cx.path("release").display(),
        ),
    );
}

/// `omnidev install ARGS` with the fakes first on PATH, the usual tools
/// after them, and `$FAKE_COMMIT` for [`slow_uv`].
fn install_with_slow_uv(cx: &Context, args: &[&str], commit: &str) -> std::process::Child {
    let mut command = cx.omnidev_isolated(&[&["install"], args].concat());
    command
        .env("OMNIDEV_SKIP_WEB_CHECK", "1")
        .env("FAKE_COMMIT", commit)
        .env("PATH", format!("{}:/usr/bin:/bin", cx.path("bin").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command.spawn().expect("spawn install")
}

/// The pids of the uv started last and of its helper, once it has started.
fn uv_pids(cx: &Context) -> (i32, i32) {
    let mut pids = None;
    wait_for("uv to start", || {
        pids = std::fs::read_to_string(cx.path("uv-pids")).ok().and_then(|text| {
            let line = text.lines().last()?.to_owned();
            let (uv, helper) = line.split_once(' ')?;
            Some((uv.parse().ok()?, helper.parse().ok()?))
        });
        pids.is_some()
    });
    pids.expect("pids")
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    u32::try_from(pid)
        .ok()
        .and_then(omnidev_core::platform::stat)
        .is_some_and(|stat| !stat.is_zombie())
}

#[test]
fn kill_9_of_install_leaves_no_uv_and_the_previous_install_described() {
    let cx = Context::new();
    cx.write_install_toml("file:///nowhere/previous.git");
    cx.write_cache(now(), OLD, OLD, None);
    let choice_before = std::fs::read(cx.install_toml()).expect("choice");
    let cache_before = std::fs::read(cx.cache_file()).expect("cache");
    slow_uv(&cx);
    let mut install =
        install_with_slow_uv(&cx, &["--git", "file:///nowhere/new.git", "--ref", "dev"], NEW);
    let (uv, helper) = uv_pids(&cx);
    install.kill().expect("kill -9");
    let _ = install.wait();
    // The guard ends them (uv sleeps for minutes); a loaded machine may
    // take it a while, so the wait is generous, as every wait here.
    wait_for("uv and its helper gone after kill -9", || !alive(uv) && !alive(helper));
    assert_eq!(std::fs::read(cx.install_toml()).expect("choice"), choice_before);
    assert_eq!(std::fs::read(cx.cache_file()).expect("cache"), cache_before);
    let output = run(&mut cx.omnidev_isolated(&["check"]));
    assert!(text(&output.stderr).contains("omnigent 111111111111 is up to date"), "{output:?}");
}

#[test]
fn a_second_install_is_refused_while_one_runs_and_choice_and_cache_agree() {
    let cx = Context::new();
    slow_uv(&cx);
    let first = install_with_slow_uv(&cx, &["--git", "file:///nowhere/o.git", "--ref", "one"], NEW);
    let _ = uv_pids(&cx);
    let second =
        install_with_slow_uv(&cx, &["--git", "file:///nowhere/o.git", "--ref", "two"], NEWER)
            .wait_with_output()
            .expect("second");
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let said = text(&second.stderr);
    assert!(
        said.contains(&format!(
            "another `omnidev install` or `omnidev update` is running (pid {})",
            first.id()
        )),
        "{said}"
    );
    assert!(!cx.install_toml().exists(), "nothing saved before uv is done");
    std::fs::write(cx.path("release"), "").expect("release");
    let first = first.wait_with_output().expect("first");
    assert!(first.status.success(), "{first:?}");
    let saved = std::fs::read_to_string(cx.install_toml()).expect("choice");
    assert!(saved.contains("ref = \"one\""), "{saved}");
    let cache = cx.cache();
    assert_eq!(cache["ref"], "one");
    assert_eq!(cache["installed_commit"], NEW);
    assert_eq!(cx.marker_lines("uv").iter().filter(|l| l.starts_with("tool install")).count(), 1);
}

#[test]
fn corrupt_install_toml_is_an_error_naming_it() {
    let cx = Context::new();
    std::fs::create_dir_all(cx.install_toml().parent().expect("parent")).expect("dir");
    std::fs::write(cx.install_toml(), "repo = \"unterminated\n").expect("write");
    for verb in ["update", "refresh"] {
        let output = cx.isolated_code(&[verb], 1);
        let stderr = text(&output.stderr);
        assert!(stderr.contains("install.toml"), "{verb}: {stderr}");
        assert!(stderr.contains("corrupt"), "{verb}: {stderr}");
    }
    assert!(cx.marker_lines("uv").is_empty());
}

// ---------------------------------------------------------------------------
// refresh: GitHub API and git fallback

/// An HTTP server answering every request with `status` and `body`;
/// returns its base URL and a count of requests.
fn http_server(
    status: &'static str,
    body: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            let Ok(mut connection) = connection else {
                continue;
            };
            let mut reader = BufReader::new(connection.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = write!(
                connection,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (base, count)
}

#[test]
fn refresh_uses_the_github_api_and_falls_back_to_git() {
    let cx = Context::new();
    cx.write_install_toml("https://github.com/o/r.git");
    let (base, count) = http_server("200 OK", NEW);
    cx.omnidev(&["refresh"]).env("OMNIDEV_GITHUB_API_URL", &base).assert().success();
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(cx.cache()["remote_commit"], NEW);

    // The API fails; git (mapped onto a local repository) answers.
    let repos = tempfile::tempdir().expect("temp dir");
    let (url, work) = package_repo(repos.path());
    let head = git(&work, &["rev-parse", "HEAD"]);
    let (base, count) = http_server("500 Internal Server Error", "");
    cx.omnidev(&["refresh"])
        .env("OMNIDEV_GITHUB_API_URL", &base)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", format!("url.{url}.insteadOf"))
        .env("GIT_CONFIG_VALUE_0", "https://github.com/o/r.git")
        .assert()
        .success();
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1, "the API was tried");
    assert_eq!(cx.cache()["remote_commit"], head.as_str());
}

#[test]
fn refresh_rewrites_a_corrupt_cache() {
    let cx = Context::new();
    let repos = tempfile::tempdir().expect("temp dir");
    let (url, work) = package_repo(repos.path());
    cx.write_install_toml(&url);
    std::fs::create_dir_all(cx.cache_file().parent().expect("parent")).expect("dir");
    std::fs::write(cx.cache_file(), "not json at all").expect("corrupt");
    cx.omnidev(&["refresh"]).assert().success();
    let cache = cx.cache();
    assert_eq!(cache["remote_commit"], git(&work, &["rev-parse", "HEAD"]).as_str());
    assert_eq!(cache["repo"], url.as_str());
    assert!(cache["checked_at"].as_u64().expect("checked_at") + 60 >= now());
}

// ---------------------------------------------------------------------------
// install and update with real uv

fn python_version() -> String {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
        .output()
        .expect("python3");
    text(&output.stdout).trim().to_owned()
}

fn installed_commit(cx: &Context) -> String {
    let lib = cx.path("uv/tools/omnigent/lib");
    for python in std::fs::read_dir(&lib).expect("tool lib") {
        let site = python.expect("entry").path().join("site-packages");
        for entry in std::fs::read_dir(&site).expect("site-packages") {
            let path = entry.expect("entry").path();
            let name = path.file_name().expect("name").to_string_lossy().into_owned();
            if name.starts_with("omnigent-") && name.ends_with(".dist-info") {
                let text =
                    std::fs::read_to_string(path.join("direct_url.json")).expect("direct_url");
                let json: serde_json::Value = serde_json::from_str(&text).expect("json");
                return json["vcs_info"]["commit_id"].as_str().expect("commit").to_owned();
            }
        }
    }
    panic!("no omnigent dist-info under {}", lib.display());
}

#[test]
fn install_refresh_check_decline_update_with_real_uv() {
    let cx = Context::new();
    let repos = tempfile::tempdir().expect("temp dir");
    let (url, work) = package_repo(repos.path());
    let first = git(&work, &["rev-parse", "HEAD"]);
    let python = python_version();

    let output = cx
        .omnidev(&[
            "install",
            "--git",
            &url,
            "--ref",
            "main",
            "--no-default-extra",
            "--python",
            &python,
        ])
        .env("OMNIDEV_SKIP_WEB_CHECK", "1")
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(text(&output.stdout).contains(&first[..12]), "{output:?}");

    let list = run(&mut cx.command("uv", &["tool", "list"]));
    assert!(text(&list.stdout).contains("omnigent"), "uv tool list: {list:?}");
    assert_eq!(installed_commit(&cx), first);
    assert_eq!(cx.cache()["installed_commit"], first.as_str());

    let output = run(&mut cx.omnidev(&["check"]));
    assert!(text(&output.stderr).contains("is up to date"), "{output:?}");

    // A new commit lands: refresh (git ls-remote, file:// is not GitHub),
    // then check tells.
    let second = commit_and_push(&work, &url, "two");
    cx.omnidev(&["refresh"]).assert().success();
    let output = run(&mut cx.omnidev(&["check", "--quiet"]));
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&format!("{} -> {}", &first[..12], &second[..12])), "{stderr}");

    let (ok, shown) = check_on_terminal(&cx, "n\n");
    assert!(ok && shown.contains("will not be offered again"), "{shown}");
    let output = run(&mut cx.omnidev(&["check", "--quiet"]));
    assert_eq!(text(&output.stderr), "", "declined");
    let third = commit_and_push(&work, &url, "three");
    cx.omnidev(&["refresh"]).assert().success();
    let output = run(&mut cx.omnidev(&["check", "--quiet"]));
    assert!(text(&output.stderr).contains(&third[..12]), "newer is offered: {output:?}");

    let head = git(&work, &["rev-parse", "HEAD"]);
    cx.omnidev(&["update"]).env("OMNIDEV_SKIP_WEB_CHECK", "1").assert().success();
    assert_eq!(installed_commit(&cx), head, "update installed the newest commit");
    let output = run(&mut cx.omnidev(&["check", "--quiet"]));
    assert_eq!(text(&output.stderr), "", "up to date after update: {output:?}");
}

// ---------------------------------------------------------------------------
// shell-hook

#[test]
fn shell_hook_snapshots() {
    let cx = Context::new();
    for shell in ["bash", "zsh", "fish"] {
        let output = cx.omnidev(&["shell-hook", shell]).assert().success().get_output().clone();
        insta::assert_snapshot!(format!("shell_hook_{shell}"), text(&output.stdout));
    }
}

/// Runs the bash snippet; returns whether the fake omnidev was called.
fn run_bash_snippet(cx: &Context, interactive: bool, with_omnidev: bool, disabled: bool) -> bool {
    let snippet = text(&run(&mut cx.omnidev(&["shell-hook", "bash"])).stdout);
    let marker = cx.path("markers/omnidev");
    let _ = std::fs::remove_file(&marker);
    let bin = cx.path("hook-bin");
    std::fs::create_dir_all(&bin).expect("dir");
    let fake = bin.join("omnidev");
    if with_omnidev {
        write_script(&fake, &format!("echo \"$*\" >> '{}'\n", marker.display()));
    } else {
        let _ = std::fs::remove_file(&fake);
    }
    let mut command = Command::new("bash");
    command.args(["--norc", "--noprofile"]);
    if interactive {
        command.arg("-i");
    }
    command
        .args(["-c", &format!("{snippet}\necho hook-done")])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", cx.path("home"))
        .stdin(Stdio::null());
    if disabled {
        command.env("OMNIDEV_NO_UPDATE_CHECK", "1");
    }
    let output = command.output().expect("bash");
    assert!(output.status.success(), "{output:?}");
    assert!(text(&output.stdout).contains("hook-done"), "{output:?}");
    assert!(!text(&output.stderr).contains("not found"), "{output:?}");
    let called = std::fs::read_to_string(&marker).unwrap_or_default();
    if !called.is_empty() {
        assert_eq!(called.trim(), "check --quiet");
    }
    !called.is_empty()
}

#[test]
fn bash_hook_runs_only_in_interactive_shells_with_omnidev_and_not_disabled() {
    let cx = Context::new();
    assert!(run_bash_snippet(&cx, true, true, false), "interactive: called");
    assert!(!run_bash_snippet(&cx, false, true, false), "non-interactive: not called");
    assert!(!run_bash_snippet(&cx, true, true, true), "OMNIDEV_NO_UPDATE_CHECK: not called");
    assert!(!run_bash_snippet(&cx, true, false, false), "no omnidev on PATH: nothing");
}

#[test]
fn bash_hook_never_fails_the_shell() {
    let cx = Context::new();
    let snippet = text(&run(&mut cx.omnidev(&["shell-hook", "bash"])).stdout);
    let bin = cx.path("failing-bin");
    std::fs::create_dir_all(&bin).expect("dir");
    write_script(&bin.join("omnidev"), "exit 7\n");
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-i", "-e", "-c", &format!("{snippet}\necho survived")])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    assert!(output.status.success(), "{output:?}");
    assert!(text(&output.stdout).contains("survived"));
}

/// The stamp the real `CheckCache::save` writes (here through a declined
/// update: nothing on offer, checked now) makes bash, zsh and fish start
/// nothing; a stale entry, or one with an update on offer, runs the check.
#[test]
fn a_fresh_quiet_cache_makes_every_shell_hook_start_nothing() {
    let cx = Context::new();
    let shells: [(&str, &[&str]); 3] = [
        ("bash", &["--norc", "--noprofile", "-i", "-c"]),
        ("zsh", &["-f", "-i", "-c"]),
        ("fish", &["--no-config", "-i", "-c"]),
    ];
    let bin = cx.path("quiet-bin");
    std::fs::create_dir_all(&bin).expect("dir");
    let marker = cx.path("markers/quiet");
    write_script(&bin.join("omnidev"), &format!("echo \"$*\" >> '{}'\n", marker.display()));
    let called = |shell: &str, args: &[&str]| -> bool {
        let _ = std::fs::remove_file(&marker);
        let snippet = text(&run(&mut cx.omnidev(&["shell-hook", shell])).stdout);
        let output = Command::new(shell)
            .args(args)
            .arg(format!("{snippet}\necho hook-done"))
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", cx.path("home"))
            .env("XDG_CACHE_HOME", cx.path("cache"))
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .output()
            .expect("shell");
        assert!(text(&output.stdout).contains("hook-done"), "{shell}: {output:?}");
        std::fs::read_to_string(&marker).is_ok_and(|text| text.trim() == "check --quiet")
    };
    // An update on offer, declined at the prompt: `CheckCache::save` writes
    // the stamp (nothing is on offer any more).
    cx.write_cache(now(), OLD, NEW, None);
    let stamp = cx.path("cache/omnidev/omnigent-check.quiet");
    for (shell, args) in shells {
        assert!(called(shell, args), "{shell}: no stamp yet, the check runs");
    }
    let (ok, shown) = check_on_terminal(&cx, "n\n");
    assert!(ok && shown.contains("will not be offered again"), "{shown}");
    assert!(stamp.is_file(), "the decline wrote the stamp");
    for (shell, args) in shells {
        assert!(!called(shell, args), "{shell}: fresh and quiet, nothing started");
    }
    // A day later (the stamp's time moved back): the check runs again.
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    let text_then = format!("{} 86400\n", now() - 86_400);
    std::fs::write(&stamp, text_then).expect("stamp");
    std::fs::File::options()
        .write(true)
        .open(&stamp)
        .and_then(|file| file.set_modified(day_ago))
        .expect("mtime");
    for (shell, args) in shells {
        assert!(called(shell, args), "{shell}: a day old, the check runs");
    }
}

/// zsh and fish run the hook for real (`.ci/run` installs them).
#[test]
fn zsh_and_fish_run_the_hook() {
    let cx = Context::new();
    for (shell, args) in
        [("zsh", vec!["-f", "-i", "-c"]), ("fish", vec!["--no-config", "-i", "-c"])]
    {
        let snippet = text(&run(&mut cx.omnidev(&["shell-hook", shell])).stdout);
        let bin = cx.path(&format!("{shell}-bin"));
        std::fs::create_dir_all(&bin).expect("dir");
        let marker = cx.path(&format!("markers/{shell}"));
        write_script(&bin.join("omnidev"), &format!("echo \"$*\" >> '{}'\n", marker.display()));
        let output = Command::new(shell)
            .args(&args)
            .arg(&snippet)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", cx.path("home"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "`{shell}` could not be started ({error}): this test needs {shell} on PATH \
                     (`apt-get install {shell}`; `cargo xtask ci` checks for it first)"
                )
            });
        assert!(output.status.success(), "{shell}: {output:?}");
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap_or_default().trim(),
            "check --quiet",
            "{shell}"
        );
    }
}
