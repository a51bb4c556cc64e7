//! Shared test context: a temp HOME/XDG tree, a checkout, and snapshot
//! filters for temp paths, ports and pids.
#![allow(dead_code, clippy::missing_panics_doc, clippy::new_without_default)]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TestContext {
    pub temp: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub repo: PathBuf,
}

impl TestContext {
    /// A context whose checkout (`repo/`) has a `.git` directory.
    pub fn new() -> Self {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().canonicalize().expect("canonical");
        let home = root.join("home");
        let repo = root.join("repo");
        for dir in [&home, &repo, &repo.join(".git"), &home.join(".run")] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        Self {
            temp,
            root,
            home,
            repo,
        }
    }

    /// Gives the checkout the Omnigent shape (`omnigent/`, `web/`).
    pub fn omnigent_shape(&self) {
        std::fs::create_dir_all(self.repo.join("omnigent")).expect("mkdir");
        std::fs::create_dir_all(self.repo.join("web")).expect("mkdir");
    }

    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.repo.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write");
        path
    }

    /// `XDG_RUNTIME_DIR` of the context (port registry, control sockets).
    pub fn runtime_home(&self) -> PathBuf {
        self.home.join(".run")
    }

    pub fn cache_root(&self) -> PathBuf {
        self.home.join(".cache-xdg/omnidev")
    }

    /// The only pod directory under the cache root.
    pub fn pod_dir(&self) -> Option<PathBuf> {
        std::fs::read_dir(self.cache_root())
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.is_dir())
    }

    /// `omnidev` with a clean environment rooted in the temp dir, run in
    /// the checkout.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_omnidev"));
        cmd.current_dir(&self.repo)
            .env("HOME", &self.home)
            .env("XDG_CACHE_HOME", self.home.join(".cache-xdg"))
            .env("XDG_CONFIG_HOME", self.home.join(".config-xdg"))
            .env("XDG_RUNTIME_DIR", self.runtime_home())
            .env("NO_COLOR", "1")
            .env_remove("OMNIGENT_CONFIG_HOME")
            .env("COLUMNS", "100")
            .stdin(Stdio::null());
        cmd
    }

    /// Output as `exit code / stdout / stderr` with stable placeholders.
    pub fn render(&self, output: &std::process::Output) -> String {
        let text = format!(
            "exit: {:?}\n--- stdout\n{}--- stderr\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        self.filter(&text)
    }

    pub fn filter(&self, text: &str) -> String {
        text.replace(&self.root.display().to_string(), "[TEMP]")
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

    /// Runs `omnidev ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.command().args(args).output().expect("run omnidev")
    }

    /// Runs `omnidev ARGS`, which must exit 0; its stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "omnidev {args:?}\n{}",
            self.render(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Spawns `omnidev` in the background with piped output.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn omnidev")
    }
}

/// Polls `condition` every 20 ms until it holds or `deadline` passes.
pub fn wait_for(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process with this pid exists (and is not a zombie we own).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    if !exists {
        return false;
    }
    // A zombie (exited, not yet reaped by its new parent) is not running.
    omnidev_core::platform::stat(pid as u32).is_some_and(|s| !s.is_zombie())
}

pub fn read_pids(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok) {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
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
            format!(
                "link {}",
                std::fs::read_link(&path).expect("readlink").display()
            )
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
