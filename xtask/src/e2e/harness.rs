//! The e2e harness: a temp root and base environment shared by every case
//! ([`Harness`]), one case's world ([`Ctx`]: HOME, tag, commands, output
//! files, clean-up), and a running pod ([`Pod`]).

use std::cell::RefCell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::example::parse;
use super::processes::{TAG_VAR, describe, tagged_processes};
use crate::util;

/// What all cases share: the binary, the temp root, the base environment.
pub(super) struct Harness {
    /// The omnidev binary under test.
    pub(super) omnidev: PathBuf,
    /// The temp directory holding every case's files.
    pub(super) root: PathBuf,
    example: PathBuf,
    /// Variables set for every process the cases start (on top of the
    /// inherited environment minus `OMNIGENT_*`/`OMNIDEV_*`).
    env: Vec<(String, String)>,
}

impl Harness {
    pub(super) fn new(omnidev: PathBuf) -> Result<Self> {
        // Short paths: the pod's control socket lives under the temp HOME
        // and unix socket paths are limited to ~100 bytes.
        let root = std::env::temp_dir().join(format!("omnidev-e2e-{}", std::process::id()));
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::create_dir_all(root.join("run"))?;
        let example = util::workspace_root().join("examples/omnigent-example");
        let shared = util::target_dir().join("e2e-cache");
        let mut env = vec![
            ("UV_CACHE_DIR".into(), real_cache_dir("uv", &["cache", "dir"], &shared.join("uv"))),
            (
                "npm_config_cache".into(),
                real_cache_dir("npm", &["config", "get", "cache"], &shared.join("npm")),
            ),
            ("npm_config_update_notifier".into(), "false".into()),
            ("npm_config_fund".into(), "false".into()),
            ("npm_config_audit".into(), "false".into()),
            ("GIT_AUTHOR_NAME".into(), "omnidev e2e".into()),
            ("GIT_AUTHOR_EMAIL".into(), "e2e@omnidev.invalid".into()),
            ("GIT_COMMITTER_NAME".into(), "omnidev e2e".into()),
            ("GIT_COMMITTER_EMAIL".into(), "e2e@omnidev.invalid".into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ];
        // Pythons installed by uv live under the real home; keep finding them.
        if let Ok(output) = Command::new("uv").args(["python", "dir"]).output() {
            let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
            if output.status.success() && !dir.is_empty() {
                env.push(("UV_PYTHON_INSTALL_DIR".into(), dir));
            }
        }
        Ok(Self { omnidev, root, example, env })
    }
}

/// The cache directory a tool uses with the real HOME, or `fallback`.
fn real_cache_dir(tool: &str, args: &[&str], fallback: &Path) -> String {
    Command::new(tool)
        .args(args)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|dir| !dir.is_empty() && dir != "undefined")
        .unwrap_or_else(|| fallback.display().to_string())
}

/// One case's world: its temp dir and HOME, its tag, the outputs it produced.
pub struct Ctx<'h> {
    harness: &'h Harness,
    /// The case's temp directory.
    pub dir: PathBuf,
    /// The HOME given to omnidev.
    pub home: PathBuf,
    /// The value of `OMNIDEV_E2E_TAG` for the processes of this case.
    pub tag: String,
    outputs: Vec<PathBuf>,
    notes: Vec<String>,
    /// omnidev processes of this case's pods still unwaited when their
    /// [`Pod`] was dropped: reaped by [`Ctx::cleanup`], not left as zombies.
    unreaped: Rc<RefCell<Vec<Child>>>,
}

impl<'h> Ctx<'h> {
    pub(super) fn new(harness: &'h Harness, index: usize, name: &str) -> Result<Self> {
        let dir = harness.root.join(format!("c{index:02}"));
        let home = dir.join("h");
        for sub in [".cache", ".config", ".local/share", ".local/state"] {
            fs::create_dir_all(home.join(sub))?;
        }
        let tag = format!("{}-{index:02}-{name}", std::process::id());
        Ok(Self {
            harness,
            dir,
            home,
            tag,
            outputs: Vec::new(),
            notes: Vec::new(),
            unreaped: Rc::default(),
        })
    }

    /// The omnidev binary under test.
    pub fn omnidev_path(&self) -> &Path {
        &self.harness.omnidev
    }

    /// `XDG_CACHE_HOME` of this case (pods live in `<it>/omnidev/`).
    pub fn cache_home(&self) -> PathBuf {
        self.home.join(".cache")
    }

    /// `XDG_RUNTIME_DIR` of this case (the port registry and the control
    /// sockets of its pods, whatever their cache root): one for every case,
    /// as one user's pods share it, so that pods of cases running at once
    /// never race for a port.
    pub fn runtime_home(&self) -> PathBuf {
        self.harness.root.join("run")
    }

    /// `XDG_CONFIG_HOME` of this case.
    pub fn config_home(&self) -> PathBuf {
        self.home.join(".config")
    }

    /// Record a measured figure, printed on the case's result line.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(super) fn notes(&self) -> String {
        if self.notes.is_empty() { String::new() } else { format!(" [{}]", self.notes.join("; ")) }
    }

    /// Apply the case's environment to `command`, tagging it with `tag`.
    fn apply_env(&self, command: &mut Command, tag: &str) {
        for (name, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))) {
            if name.starts_with("OMNIGENT_")
                || name.starts_with("OMNIDEV_")
                || name.starts_with("CARGO")
            {
                command.env_remove(&name);
            }
        }
        command
            .env("HOME", &self.home)
            .env("XDG_CACHE_HOME", self.cache_home())
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("XDG_STATE_HOME", self.home.join(".local/state"))
            .env("XDG_RUNTIME_DIR", self.runtime_home())
            .env(TAG_VAR, tag);
        for (name, value) in &self.harness.env {
            command.env(name, value);
        }
    }

    /// A command for `program` with the case's environment and tag.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        self.apply_env(&mut command, &self.tag);
        command.stdin(Stdio::null());
        command
    }

    /// Like `command`, with a tag derived from the case's (killed on
    /// cleanup, but not counted as a process of the pod).
    pub fn command_with_subtag(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        subtag: &str,
    ) -> Command {
        let mut command = Command::new(program);
        self.apply_env(&mut command, &format!("{}.{subtag}", self.tag));
        command.stdin(Stdio::null());
        command
    }

    /// A command running the omnidev under test.
    pub fn omnidev(&self) -> Command {
        self.command(&self.harness.omnidev)
    }

    /// Run omnidev to completion (killed after `timeout`): status and
    /// combined, ANSI-stripped output.
    pub fn run_omnidev(
        &mut self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<(ExitStatus, String)> {
        let mut command = self.omnidev();
        command.args(args);
        self.run_to_end(command, &args.join("-"), timeout)
    }

    /// `omnidev wait --healthy-after-reload` of the pod of `repo`: returns
    /// once the reload of the latest change its watcher saw is healthy (a
    /// change seen meanwhile moves the wait on to its reload).
    pub fn wait_healthy_after_reload(&mut self, repo: &Path) -> Result<()> {
        let repo = repo.display().to_string();
        let args = ["wait", "--healthy-after-reload", "--timeout", "60", "--repo", &repo];
        let (status, out) = self.run_omnidev(&args, UP)?;
        anyhow::ensure!(status.success(), "omnidev {args:?} failed ({status}):\n{out}");
        Ok(())
    }

    /// Run `command` to completion with its output in a file of the case.
    pub fn run_to_end(
        &mut self,
        mut command: Command,
        label: &str,
        timeout: Duration,
    ) -> Result<(ExitStatus, String)> {
        let out = self.output_file(label);
        let file = fs::File::create(&out)?;
        command.stdout(file.try_clone()?).stderr(file);
        let description = format!("{command:?}");
        let mut child = command.spawn().with_context(|| format!("spawning {description}"))?;
        let status =
            util::wait_for(&format!("`{label}` to exit"), timeout, || Ok(child.try_wait()?))
                .inspect_err(|_| {
                    let _ = child.kill();
                    let _ = child.wait();
                })?;
        let text = util::strip_ansi(&String::from_utf8_lossy(&fs::read(&out)?));
        Ok((status, text))
    }

    /// A new file of the case for the output of `label`.
    pub fn output_file(&mut self, label: &str) -> PathBuf {
        let safe: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .take(40)
            .collect();
        let out = self.dir.join(format!("out-{:02}-{safe}.log", self.outputs.len()));
        self.outputs.push(out.clone());
        out
    }

    /// A fresh, independent checkout of the example at `<case>/<name>`:
    /// copied without build products, `git init`ed and committed.
    pub fn checkout(&self, name: &str) -> Result<PathBuf> {
        let dest = self.dir.join(name);
        copy_tree(&self.harness.example, &dest)?;
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["add", "-A"],
            &["commit", "-q", "-m", "example checkout"],
        ] {
            let status = self.command("git").args(args).current_dir(&dest).status()?;
            if !status.success() {
                bail!("git {} failed in {}", args.join(" "), dest.display());
            }
        }
        Ok(dest)
    }

    /// Start `omnidev up --headless --repo <repo> <extra>` in the background.
    pub fn up(&mut self, repo: &Path, extra: &[&str]) -> Result<Pod> {
        let mut command = self.omnidev();
        command.arg("up").arg("--headless").arg("--repo").arg(repo).args(extra);
        self.spawn_pod(command, repo)
    }

    /// Start plain `omnidev --headless <extra>` inside `repo`, as a user
    /// would type it there.
    pub fn up_plain(&mut self, repo: &Path, extra: &[&str]) -> Result<Pod> {
        let mut command = self.omnidev();
        command.arg("--headless").args(extra).current_dir(repo);
        self.spawn_pod(command, repo)
    }

    /// Start `command` (an omnidev run for `repo`) in the background, its
    /// output going to a file of the case.
    pub fn spawn_pod(&mut self, mut command: Command, repo: &Path) -> Result<Pod> {
        let name = repo.file_name().map_or("pod".into(), |n| n.to_string_lossy().into_owned());
        let out = self.output_file(&format!("up-{name}"));
        let file = fs::File::create(&out)?;
        command.stdout(file.try_clone()?).stderr(file);
        let child = command.spawn().context("spawning omnidev up")?;
        Ok(Pod {
            child: Some(child),
            out,
            tag: self.tag.clone(),
            exited: None,
            unreaped: Rc::clone(&self.unreaped),
        })
    }

    /// Processes of this case's pod(s) still running: (pid, command line).
    pub fn pod_processes(&self) -> Vec<(u32, String)> {
        tagged_processes(|value| value == self.tag)
    }

    /// Wait until no process of the pod is left, or fail listing them.
    ///
    /// A process counts as gone once it has wholly exited (no entry, or a
    /// zombie), not once its environment can no longer be read: a killed
    /// process loses that first and holds its files (a pod lock) a moment
    /// longer. So each process seen tagged is followed to its end, known
    /// by its pid and start time across pid reuse.
    pub fn wait_no_pod_process(&self, timeout: Duration) -> Result<()> {
        use omnidev_core::platform::stat;
        let mut seen = std::collections::BTreeMap::new();
        let waited = util::wait_for("no process of the pod to remain", timeout, || {
            for (pid, _) in self.pod_processes() {
                if let Some(process) = stat(pid) {
                    seen.insert(pid, process.start_time);
                }
            }
            seen.retain(|&pid, started| {
                stat(pid).is_some_and(|p| p.start_time == *started && !p.is_zombie())
            });
            Ok(seen.is_empty().then_some(()))
        });
        waited.map_err(|error| {
            anyhow!("{error}; still running:\n{}", describe(&self.pod_processes()))
        })
    }

    /// Kill everything the case started; `Some(list)` when a process of
    /// the pod itself was left (helpers such as a tmux server under a
    /// sub-tag may still be exiting and are killed without complaint).
    pub(super) fn cleanup(&self) -> Option<String> {
        let prefix = &self.tag;
        let mine = |value: &str| value == prefix || value.starts_with(&format!("{prefix}."));
        let left = self.pod_processes();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = tagged_processes(mine);
            if now.is_empty() || Instant::now() > deadline {
                break;
            }
            let pids: Vec<String> = now.iter().map(|(pid, _)| pid.to_string()).collect();
            let _ = Command::new("kill").arg("-KILL").args(&pids).stderr(Stdio::null()).status();
            std::thread::sleep(Duration::from_millis(100));
        }
        // Every process of the case is gone or killed: wait for the pods'
        // omnidev processes (ours) so that none stays a zombie.
        for mut child in self.unreaped.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        (!left.is_empty()).then(|| describe(&left))
    }

    pub(super) fn print_output_tails(&self) {
        for out in &self.outputs {
            let text =
                util::strip_ansi(&String::from_utf8_lossy(&fs::read(out).unwrap_or_default()));
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            println!("     --- last {} line(s) of {}", tail.len(), out.display());
            for line in tail {
                println!("     | {line}");
            }
        }
    }
}

/// Copy `src` to `dest`, skipping build products and local state.
fn copy_tree(src: &Path, dest: &Path) -> Result<()> {
    const SKIP: &[&str] = &[".venv", "node_modules", "__pycache__", ".install-log", ".git"];
    fs::create_dir_all(dest)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let name = entry.file_name();
        if SKIP.iter().any(|skip| name == *skip) {
            continue;
        }
        let kind = entry.file_type()?;
        let to = dest.join(&name);
        if kind.is_dir() {
            copy_tree(&entry.path(), &to)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// A running `omnidev up --headless` whose output goes to a file.
pub struct Pod {
    /// omnidev; `None` only once dropped.
    child: Option<Child>,
    out: PathBuf,
    tag: String,
    exited: Option<ExitStatus>,
    unreaped: Rc<RefCell<Vec<Child>>>,
}

impl Drop for Pod {
    /// A pod still running (or exited, unwaited) is handed to its case,
    /// whose clean-up first counts it as left behind, then kills and reaps it.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && self.exited.is_none()
            && !matches!(child.try_wait(), Ok(Some(_)))
        {
            self.unreaped.borrow_mut().push(child);
        }
    }
}

/// The example server as seen in a pod's output and over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// Its port.
    pub port: u16,
    /// The Python process' pid (from `/health`).
    pub pid: u32,
}

impl Pod {
    fn child(&self) -> &Child {
        self.child.as_ref().expect("a pod's child is taken only on drop")
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a pod's child is taken only on drop")
    }

    /// omnidev's pid.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    /// Everything printed so far, ANSI-stripped.
    pub fn output(&self) -> String {
        util::strip_ansi(&String::from_utf8_lossy(&fs::read(&self.out).unwrap_or_default()))
    }

    /// Fail if omnidev has exited.
    fn check_running(&mut self) -> Result<()> {
        if self.exited.is_none() {
            self.exited = self.child_mut().try_wait()?;
        }
        match self.exited {
            Some(status) => {
                Err(anyhow!("omnidev exited early ({status}); output in {}", self.out.display()))
            }
            None => Ok(()),
        }
    }

    /// Wait until `probe` finds something in the output (failing early if omnidev exits).
    pub fn wait_output<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        probe: impl Fn(&str) -> Option<T>,
    ) -> Result<T> {
        util::wait_for(what, timeout, || {
            if let Some(found) = probe(&self.output()) {
                return Ok(Some(found));
            }
            self.check_running()?;
            Ok(None)
        })
    }

    /// Wait for the example server to listen and answer `/health`; a server
    /// other than `not` when given (after a restart).
    pub fn server(&mut self, not: Option<u32>, timeout: Duration) -> Result<Server> {
        util::wait_for("the example server to answer /health", timeout, || {
            self.check_running()?;
            let Some((port, _)) = parse::listening(&self.output()).last().copied() else {
                return Ok(None);
            };
            let Ok((200, body)) = util::http_get(port, "/health") else {
                return Ok(None);
            };
            let pid = util::json_field(&body, "pid").and_then(|p| p.parse().ok());
            Ok(pid.filter(|pid| Some(*pid) != not).map(|pid| Server { port, pid }))
        })
    }

    /// Wait for the example web server and return its port.
    pub fn vite(&mut self, timeout: Duration) -> Result<u16> {
        let port = self.wait_output("the web dev server's `Local:` line", timeout, |out| {
            parse::vite_ports(out).last().copied()
        })?;
        util::wait_for("the web dev server to answer GET /", timeout, || {
            Ok(matches!(util::http_get(port, "/"), Ok((200, _))).then_some(()))
        })?;
        Ok(port)
    }

    /// Wait for server, host (connected) and web: the whole pod is up.
    pub fn ready(&mut self, timeout: Duration) -> Result<(Server, u16)> {
        let server = self.ready_backend(timeout)?;
        let vite = self.vite(timeout)?;
        Ok((server, vite))
    }

    /// Wait for the server to answer and the host to connect to it.
    pub fn ready_backend(&mut self, timeout: Duration) -> Result<Server> {
        let server = self.server(None, timeout)?;
        self.wait_output("the host to connect to the server", timeout, |out| {
            out.contains("omnigent-host: Connected as").then_some(())
        })?;
        Ok(server)
    }

    /// Send `signal` (a name such as `INT`) to omnidev.
    pub fn signal(&self, signal: &str) -> Result<()> {
        send_signal(self.pid(), signal)
    }

    /// Wait for omnidev to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let status = util::wait_for("omnidev to exit", timeout, || {
            if self.exited.is_none() {
                self.exited = self.child_mut().try_wait()?;
            }
            Ok(self.exited)
        })?;
        Ok(status)
    }

    /// Send `signal`, wait for omnidev to exit and for every process of the
    /// pod to be gone.
    pub fn stop_with(&mut self, signal: &str, ctx: &Ctx) -> Result<ExitStatus> {
        debug_assert_eq!(self.tag, ctx.tag);
        self.signal(signal)?;
        let status = self.wait_exit(Duration::from_secs(30))?;
        ctx.wait_no_pod_process(Duration::from_secs(10))?;
        Ok(status)
    }
}

/// `kill -<signal> <pid>`.
pub fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status()?;
    if !status.success() {
        bail!("kill -{signal} {pid} failed");
    }
    Ok(())
}

/// Generous deadline for a pod to come up (first `uv run` builds a venv).
pub const UP: Duration = Duration::from_mins(2);
/// Deadline for things that should happen within seconds.
pub const SOON: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    fn harness(root: &Path) -> Harness {
        Harness {
            omnidev: PathBuf::from("/bin/true"),
            root: root.to_path_buf(),
            example: root.to_path_buf(),
            env: Vec::new(),
        }
    }

    fn pod(ctx: &mut Ctx, script: &str) -> Pod {
        let mut command = ctx.command("sh");
        command.args(["-c", script]);
        let dir = ctx.dir.clone();
        ctx.spawn_pod(command, &dir).expect("spawn")
    }

    fn gone(pid: u32) -> bool {
        omnidev_core::platform::stat(pid).is_none()
    }

    #[test]
    fn pods_that_ended_or_still_run_are_reaped_not_left_as_zombies() {
        let root = tempfile::tempdir().expect("temp dir");
        let harness = harness(root.path());
        let mut ctx = Ctx::new(&harness, 0, "reap").expect("ctx");

        let ended = pod(&mut ctx, "exit 0");
        let pid = ended.pid();
        util::wait_for("the pod to end", SOON, || {
            Ok(omnidev_core::platform::stat(pid).is_some_and(|stat| stat.is_zombie()).then_some(()))
        })
        .expect("a zombie until waited");
        drop(ended);
        assert!(gone(pid), "pid {pid} left a zombie after its Pod was dropped");

        let running = pod(&mut ctx, "exec sleep 600");
        let pid = running.pid();
        // The tag shows from `sh` on; its command line is empty for a
        // moment while it becomes `sleep`: wait for `sleep` itself.
        util::wait_for("sleep to carry the tag", SOON, || {
            let processes = ctx.pod_processes();
            Ok(processes.iter().any(|(_, cmd)| cmd.contains("sleep 600")).then_some(()))
        })
        .expect("tagged");
        drop(running);
        let left = ctx.cleanup().expect("a running pod counts as left behind");
        assert!(left.contains("sleep 600"), "{left}");
        assert!(gone(pid), "pid {pid} left a zombie after the clean-up");
    }
}
