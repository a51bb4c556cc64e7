//! `omnidev up --host [USER@]HOST[:PORT]`: this checkout's pod on another
//! machine, over the user's own OpenSSH.
//!
//! One SSH connection carries everything: a master (`ssh -M -N`, a child
//! of this process that dies with it) on a control socket in the per-user
//! runtime directory, and every step after it multiplexed on that socket:
//!
//! 1. `uname -sm` and whether this build of omnidev is there already (it
//!    lives in `~/.cache/omnidev-host/bin/omnidev-<version>-<hash of the
//!    binary>` on the host); if not, this binary is copied there when the
//!    host runs the same OS and architecture, else the host's own
//!    `omnidev` is used when it is the same version, else a clear error.
//! 2. The checkout: the files git would commit (tracked and untracked, not
//!    ignored, so uncommitted changes go and `.venv` or `node_modules` do
//!    not) as a tar stream into `~/.cache/omnidev-host/checkouts/<name>-<id>` on
//!    the host. A tar needs nothing but `tar` at both ends (rsync is not on
//!    every host, and a git worktree there would need the repository and
//!    the user's access to it); the id is this machine's name and the
//!    checkout's path, so two checkouts (or two laptops) never share a
//!    directory.
//! 3. `omnidev up --detach` there: an ordinary pod of the host, which
//!    outlives the connection.
//! 4. Its ports forwarded to the same numbers on this machine's loopback
//!    (`ssh -O forward -L`), so URLs and `{port.*}` mean the same here; a
//!    port already taken here is refused by ssh, and said.
//! 5. The pod's output followed (`omnidev logs -f` there), each line shown
//!    with its control characters made visible, until the connection
//!    drops or this process is stopped; the pod goes on there either way.
//!
//! ssh is run with `BatchMode=yes` (it never asks for a password: keys or
//! the agent only) and `StrictHostKeyChecking=yes` (an unknown host key
//! is refused, never added); the rest is the user's own configuration.
//! `OMNIDEV_SSH` names another ssh program (a wrapper with `-F`, say).

use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use omnidev_pod::ids::hex;
use sha2::{Digest as _, Sha256};

use crate::cli::RemoteHost;
use crate::error::{Error, Result};
use omnidev_core::text::shell_word;

/// The multiplexed connection to a host: its master, and how to run a
/// command over it.
struct SshMaster {
    program: PathBuf,
    host: RemoteHost,
    control: PathBuf,
    master: Child,
}

impl SshMaster {
    /// Starts the master and waits until it is connected.
    fn open(host: &RemoteHost, runtime: &Path) -> Result<Self> {
        let program = std::env::var_os("OMNIDEV_SSH").map_or_else(|| "ssh".into(), PathBuf::from);
        let tag = hex(&Sha256::digest(format!("{host}:{}", std::process::id()).as_bytes()))[..12]
            .to_owned();
        let control = runtime.join(format!("ssh-{tag}.sock"));
        let mut command = Command::new(&program);
        command
            .args(["-M", "-N", "-S"])
            .arg(&control)
            .args(["-o", "ControlPersist=no", "-o", "ExitOnForwardFailure=no"])
            // A forwarded socket's file left by a killed run is replaced.
            .args(["-o", "StreamLocalBindUnlink=yes"])
            .args(["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3"]);
        common_options(&mut command, host);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        dies_with_us(&mut command);
        let mut master = command.spawn().map_err(|e| failed(host, "start ssh", e.to_string()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) =
                master.try_wait().map_err(|e| failed(host, "start ssh", e.to_string()))?
            {
                let mut said = String::new();
                if let Some(mut err) = master.stderr.take() {
                    let _ = err.by_ref().take(16 * 1024).read_to_string(&mut said);
                }
                return Err(failed(
                    host,
                    "connect",
                    format!("ssh exited with {status}: {}", visible(said.trim())),
                ));
            }
            if control.exists() {
                break;
            }
            if Instant::now() > deadline {
                let _ = master.kill();
                let _ = master.wait();
                return Err(failed(host, "connect", "no connection within 60 s".to_owned()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self { program, host: host.clone(), control, master })
    }

    /// `ssh` on the master's socket: options, then the destination.
    /// A client with no master (it ended: a signal, the connection lost)
    /// would open a connection of its own and outlive this one; the
    /// proxy that always fails makes it fail instead.
    fn ssh(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.arg("-S").arg(&self.control).args(["-o", "ControlMaster=no"]);
        command.args(["-o", "ProxyCommand=false"]);
        common_options(&mut command, &self.host);
        command
    }

    /// Runs `script` (a shell command line) there, given `input`; its
    /// standard output.
    fn run(&self, step: &str, script: &str, input: StdinOf) -> Result<String> {
        let mut command = self.ssh();
        command.arg(script).stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = match input {
            StdinOf::Nothing => command.stdin(Stdio::null()).output(),
            StdinOf::Stream(stream) => command.stdin(stream).output(),
            StdinOf::Bytes(bytes) => command.stdin(Stdio::piped()).spawn().and_then(|mut child| {
                let mut stdin = child.stdin.take().expect("piped");
                // Written beside the read of its answer, so neither waits
                // on the other; a host that stops reading ends the write.
                let writer = std::thread::spawn(move || stdin.write_all(&bytes));
                let output = child.wait_with_output();
                let _ = writer.join();
                output
            }),
        }
        .map_err(|e| failed(&self.host, step, e.to_string()))?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            let said = said.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev();
            let said: Vec<String> = said.map(visible).collect();
            return Err(failed(
                &self.host,
                step,
                format!("exited with {}: {}", output.status, said.join(" / ")),
            ));
        }
        // What it said on the way (omnidev's own notes) is shown.
        for line in String::from_utf8_lossy(&output.stderr).lines() {
            note!("{}: {line}", self.host);
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Adds the forwards `specs` (`-L` arguments: a port to the same
    /// number on this machine's loopback, a socket to a socket).
    fn forward(&self, specs: &[String]) -> Result<()> {
        if specs.is_empty() {
            return Ok(());
        }
        let mut command = Command::new(&self.program);
        command.arg("-S").arg(&self.control).args(["-O", "forward"]);
        for spec in specs {
            command.arg("-L").arg(spec);
        }
        common_options(&mut command, &self.host);
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(&self.host, "forward ports", e.to_string()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(failed(
                &self.host,
                "forward ports",
                format!(
                    "ssh could not listen here for {specs:?} (another process holds one?): {}",
                    visible(String::from_utf8_lossy(&output.stderr).trim())
                ),
            ))
        }
    }
}

impl Drop for SshMaster {
    fn drop(&mut self) {
        let _ = self.master.kill();
        let _ = self.master.wait();
        let _ = std::fs::remove_file(&self.control);
    }
}

/// What a command there reads.
enum StdinOf {
    Nothing,
    Stream(Stdio),
    Bytes(Vec<u8>),
}

/// What every ssh here is given: never a password prompt, never a host
/// key taken on trust, the port, then the destination after `--`.
fn common_options(command: &mut Command, host: &RemoteHost) {
    command.args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]);
    if let Some(port) = host.port {
        command.arg("-p").arg(port.to_string());
    }
    command.arg("--").arg(host.destination());
}

/// On Linux the child gets SIGTERM when this process ends, however it
/// ends: no ssh is left holding a connection or a forward.
fn dies_with_us(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        let parent = nix::unistd::getpid();
        // SAFETY: prctl, getppid and _exit are async-signal-safe and touch
        // no memory of the parent.
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)?;
                if nix::unistd::getppid() != parent {
                    libc::_exit(143);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

fn failed(host: &RemoteHost, step: &str, message: String) -> Error {
    Error::Remote { host: host.to_string(), step: step.to_owned(), message }
}

/// `text` with its control characters shown, not acted on.
fn visible(text: &str) -> String {
    omnidev_core::text::sanitise(text, false).into_owned()
}

/// The host's `uname -s` and `uname -m` for this build.
fn this_platform() -> (&'static str, &'static str) {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        other => other,
    };
    let arch = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("macos", "aarch64") => "arm64",
        (_, arch) => arch,
    };
    (os, arch)
}

/// The largest omnidev binary copied to a host.
const MAX_BINARY_BYTES: u64 = 512 << 20;

/// The omnidev to run there (a path relative to the host user's home, or
/// `omnidev` on the host's PATH), copying this binary there when needed
/// (`install`); `None` when there is none and `install` is false.
fn omnidev_there(connection: &SshMaster, install: bool) -> Result<Option<String>> {
    let exe = std::env::current_exe().map_err(Error::io("locate", "the omnidev binary"))?;
    let bytes = omnidev_core::fs::read_linked(&exe, MAX_BINARY_BYTES)
        .ok()
        .flatten()
        .filter(|bytes| (bytes.len() as u64) < MAX_BINARY_BYTES)
        .ok_or_else(|| failed(&connection.host, "read this omnidev", exe.display().to_string()))?;
    let version = env!("CARGO_PKG_VERSION");
    let id = &hex(&Sha256::digest(&bytes))[..16];
    let path = format!(".cache/omnidev-host/bin/omnidev-{version}-{id}");
    let probe = format!(
        "uname -s; uname -m; if test -x {p}; then echo present; else echo absent; fi; \
         command -v omnidev >/dev/null 2>&1 && omnidev --version 2>/dev/null || echo none",
        p = shell_word(&path)
    );
    let said = connection.run("look at the host", &probe, StdinOf::Nothing)?;
    let mut lines = said.lines().map(str::trim);
    let (os, arch) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let present = lines.next() == Some("present");
    let theirs = lines.next().unwrap_or("none").to_owned();
    if present {
        return Ok(Some(path));
    }
    let version_there = theirs.split_whitespace().last() == Some(version);
    if !install {
        return Ok(version_there.then(|| "omnidev".to_owned()));
    }
    let (our_os, our_arch) = this_platform();
    if os == our_os && arch == our_arch {
        let script = format!(
            "set -e; umask 077; mkdir -p .cache/omnidev-host/bin; cat > {t}; chmod 700 {t}; mv -f {t} {p}",
            t = shell_word(&format!("{path}.part")),
            p = shell_word(&path)
        );
        connection.run("copy omnidev", &script, StdinOf::Bytes(bytes))?;
        return Ok(Some(path));
    }
    if version_there {
        return Ok(Some("omnidev".to_owned()));
    }
    Err(failed(
        &connection.host,
        "install omnidev",
        format!(
            "the host runs {} {}, this omnidev is built for {our_os} {our_arch}, and the host has \
             no omnidev {version} of its own ({}); install omnidev {version} there (on its PATH)",
            visible(os),
            visible(arch),
            visible(&theirs)
        ),
    ))
}

/// The checkout's directory on the host, relative to the user's home.
fn checkout_there(repo: &Path) -> String {
    let machine =
        nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let id = &hex(&Sha256::digest(format!("{machine}\0{}", repo.display()).as_bytes()))[..12];
    let name: String = repo
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .take(40)
                .collect()
        })
        .unwrap_or_default();
    format!(
        ".cache/omnidev-host/checkouts/{}-{id}",
        if name.is_empty() { "checkout" } else { &name }
    )
}

/// The files git would commit, relative to `repo`: tracked ones that
/// still exist and untracked ones not ignored; of `only` (relative
/// paths, taken literally) when it is not empty.
fn files_to_send(repo: &Path, only: &[PathBuf]) -> Result<Vec<u8>> {
    let output = Command::new("git")
        .arg("--literal-pathspecs")
        .arg("-C")
        .arg(repo)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"])
        .args(only)
        .stderr(Stdio::piped())
        .output()
        .map_err(Error::io("run", "git ls-files"))?;
    if !output.status.success() {
        return Err(Error::RemoteCheckout {
            repo: repo.to_path_buf(),
            message: visible(String::from_utf8_lossy(&output.stderr).trim()),
        });
    }
    let mut list = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for name in output.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let path = repo.join(std::ffi::OsStr::from_bytes(name));
        if path.symlink_metadata().is_ok() && seen.insert(name.to_vec()) {
            list.extend_from_slice(name);
            list.push(0);
        }
    }
    Ok(list)
}

/// Sends the checkout's files into `dir` there.
fn send_checkout(connection: &SshMaster, repo: &Path, dir: &str) -> Result<usize> {
    send_files(connection, repo, dir, files_to_send(repo, &[])?)
}

/// Sends `list` (NUL-separated paths relative to `repo`) into `dir` there.
fn send_files(connection: &SshMaster, repo: &Path, dir: &str, list: Vec<u8>) -> Result<usize> {
    let count = list.split(|b| *b == 0).filter(|name| !name.is_empty()).count();
    if count == 0 {
        return Ok(0);
    }
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(repo)
        .args(["-c", "--null", "--no-recursion", "-T", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("run", "tar"))?;
    let mut input = tar.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || input.write_all(&list));
    let stream = tar.stdout.take().expect("piped");
    let script = format!("set -e; umask 077; mkdir -p {d}; tar -x -m -C {d}", d = shell_word(dir));
    let sent = connection.run("send the checkout", &script, StdinOf::Stream(Stdio::from(stream)));
    let _ = writer.join();
    let status = tar.wait().map_err(Error::io("run", "tar"))?;
    sent?;
    if !status.success() {
        let mut said = String::new();
        if let Some(mut err) = tar.stderr.take() {
            let _ = err.by_ref().take(16 * 1024).read_to_string(&mut said);
        }
        return Err(Error::RemoteCheckout {
            repo: repo.to_path_buf(),
            message: visible(said.trim()),
        });
    }
    Ok(count)
}

/// The command line that runs `omnidev ARGS` there on the checkout in
/// `dir`.
fn command_there(omnidev: &str, args: &str, dir: &str) -> String {
    format!("{} {args} --repo {}", shell_word(omnidev), shell_word(dir))
}

/// This machine's pod directory of the checkout, standing for the pod
/// there while connected: its lock held (so `status`, `stop`, `wait` see
/// a running pod), its control-socket pointer at a socket forwarded to
/// the pod's own, and a [`RemoteRecord`](crate::control::RemoteRecord). Undone when dropped; after a
/// SIGKILL the lock is free and clients take the pointer for stale.
struct Standing {
    pod_dir: PathBuf,
    socket: PathBuf,
    _lock: omnidev_pod::PodLock,
}

impl Standing {
    /// Takes the lock of `pod_dir` (made when missing): refused while a pod
    /// of the checkout runs here or another `up --host` stands for it.
    fn take(pod_dir: &Path) -> Result<Self> {
        omnidev_pod::Pod::create(pod_dir, &[])?;
        let lock = omnidev_pod::PodLock::acquire(pod_dir)?;
        let socket = crate::control::serving_path(pod_dir)?;
        Ok(Self { pod_dir: pod_dir.to_path_buf(), socket, _lock: lock })
    }

    /// Forwards the pod's socket there (`remote_pod_dir`'s pointer) to this
    /// pod directory's, and says which host it is.
    fn connect(
        &self,
        master: &SshMaster,
        remote_pod_dir: &Path,
        omnidev: &str,
        checkout: &str,
    ) -> Result<()> {
        if let Some(dir) = self.socket.parent() {
            omnidev_pod::runtime::ensure_private(dir)?;
        }
        let remote = crate::control::pointer_path(remote_pod_dir);
        master.forward(&[format!("{}:{}", self.socket.display(), remote.display())])?;
        crate::control::point_at(&crate::control::pointer_path(&self.pod_dir), &self.socket)
            .map_err(Error::io("point at", self.socket.clone()))?;
        let ssh = master.ssh();
        let record = crate::control::RemoteRecord {
            host: master.host.to_string(),
            pod_dir: remote_pod_dir.into(),
            ssh: std::iter::once(ssh.get_program())
                .chain(ssh.get_args())
                .map(|part| part.to_string_lossy().into_owned())
                .collect(),
            omnidev: omnidev.to_owned(),
            checkout: checkout.to_owned(),
        };
        let text = serde_json::to_vec_pretty(&record).expect("plain data");
        omnidev_core::fs::write_atomic(&self.pod_dir.join(crate::control::REMOTE_RECORD), &text)
            .map_err(Error::io("write", self.pod_dir.join(crate::control::REMOTE_RECORD)))
    }
}

impl Drop for Standing {
    fn drop(&mut self) {
        let pointer = crate::control::pointer_path(&self.pod_dir);
        if std::fs::read_link(&pointer).is_ok_and(|target| target == self.socket) {
            let _ = std::fs::remove_file(&pointer);
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(self.pod_dir.join(crate::control::REMOTE_RECORD));
    }
}

/// `omnidev up --host`: see the module docs.
pub fn up(
    host: &RemoteHost,
    repo: &Path,
    pod_dir: &Path,
    ready_timeout: Duration,
) -> Result<ExitCode> {
    let started = Instant::now();
    let standing = Standing::take(pod_dir)?;
    let connection = SshMaster::open(host, &private_runtime()?)?;
    end_on_signal(&connection)?;
    let omnidev = omnidev_there(&connection, true)?.expect("installed");
    let dir = checkout_there(repo);
    let files = send_checkout(&connection, repo, &dir)?;
    note!("omnidev: {files} files of {} sent to {host}:{dir}", repo.display());
    let up = format!("up --detach --ready-timeout {}", ready_timeout.as_secs());
    let said =
        connection.run("start the pod", &command_there(&omnidev, &up, &dir), StdinOf::Nothing)?;
    for line in said.lines() {
        note!("{host}: {line}");
    }
    let status = connection.run(
        "read the pod's status",
        &command_there(&omnidev, "status --json", &dir),
        StdinOf::Nothing,
    )?;
    let status: crate::control::PodStatus = serde_json::from_str(&status)
        .map_err(|e| failed(host, "read the pod's status", e.to_string()))?;
    let ports: Vec<u16> = status.ports.values().copied().collect();
    let specs: Vec<String> =
        ports.iter().map(|port| format!("127.0.0.1:{port}:127.0.0.1:{port}")).collect();
    connection.forward(&specs)?;
    standing.connect(&connection, &status.pod_dir, &omnidev, &dir)?;
    let sync = Sync::watch(repo)?;
    note!(
        "omnidev: the pod runs on {host} ({} there); its ports {ports:?} answer on 127.0.0.1 here \
         ({:.1} s); Ctrl-C leaves it running there, `omnidev stop --host {host}` stops it",
        status.pod_dir.display(),
        started.elapsed().as_secs_f64()
    );
    std::thread::scope(|scope| {
        let syncing = scope.spawn(|| sync.run(&connection, repo, &dir));
        let followed = follow(&connection, &command_there(&omnidev, "logs -f", &dir));
        sync.stop();
        let _ = syncing.join();
        followed
    })
}

/// Edits here carried there as they happen: each burst of changes under
/// the checkout (100 ms quiet), the files of it git would commit sent
/// again, and those deleted here (not ignored) deleted there; the pod's
/// own watcher there reloads what they touch.
struct Sync {
    events: std::sync::Mutex<std::sync::mpsc::Receiver<notify::Result<notify::Event>>>,
    _watcher: notify::RecommendedWatcher,
    stopped: std::sync::atomic::AtomicBool,
}

impl Sync {
    fn watch(repo: &Path) -> Result<Self> {
        use notify::Watcher as _;
        let (tx, rx) = std::sync::mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })
        .map_err(|e| Error::RemoteCheckout { repo: repo.to_path_buf(), message: e.to_string() })?;
        watcher.watch(repo, notify::RecursiveMode::Recursive).map_err(|e| {
            Error::RemoteCheckout { repo: repo.to_path_buf(), message: e.to_string() }
        })?;
        Ok(Self {
            events: std::sync::Mutex::new(rx),
            _watcher: watcher,
            stopped: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn run(&self, connection: &SshMaster, repo: &Path, dir: &str) {
        use std::sync::atomic::Ordering;
        let events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let quiet = Duration::from_millis(100);
        while !self.stopped.load(Ordering::Relaxed) {
            let mut changed = std::collections::BTreeSet::new();
            let Ok(first) = events.recv_timeout(Duration::from_millis(250)) else {
                continue;
            };
            let mut take = |event: notify::Result<notify::Event>| {
                let Ok(event) = event else { return };
                if matches!(event.kind, notify::EventKind::Access(_)) {
                    return;
                }
                for path in event.paths {
                    if let Ok(relative) = path.strip_prefix(repo)
                        && !relative.starts_with(".git")
                        && !relative.as_os_str().is_empty()
                    {
                        changed.insert(relative.to_path_buf());
                    }
                }
            };
            take(first);
            while let Ok(more) = events.recv_timeout(quiet) {
                take(more);
            }
            if changed.is_empty() {
                continue;
            }
            let changed: Vec<PathBuf> = changed.into_iter().collect();
            if let Err(e) = carry(connection, repo, dir, &changed) {
                note!("omnidev: changes not carried to {}: {e}", connection.host);
            }
        }
    }
}

/// Sends `changed` (relative paths) there: those git would commit, and
/// the deletion of those gone here that git does not ignore.
fn carry(connection: &SshMaster, repo: &Path, dir: &str, changed: &[PathBuf]) -> Result<()> {
    let (here, gone): (Vec<PathBuf>, Vec<PathBuf>) =
        changed.iter().cloned().partition(|path| repo.join(path).symlink_metadata().is_ok());
    send_files(connection, repo, dir, files_to_send(repo, &here)?)?;
    let gone = not_ignored(repo, &gone)?;
    if !gone.is_empty() {
        let mut script = format!("cd {} && rm -rf --", shell_word(dir));
        for path in &gone {
            script.push(' ');
            script.push_str(&shell_word(&path.to_string_lossy()));
        }
        connection.run("delete files", &script, StdinOf::Nothing)?;
    }
    Ok(())
}

/// Those of `paths` (relative to `repo`, gone here) git's ignore rules do
/// not ignore, as a file or as a directory (a rule for `.venv/` keeps the
/// host's `.venv` when the one here is removed): when in doubt, a file
/// stays there.
fn not_ignored(repo: &Path, paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut asked = Vec::new();
    for path in paths {
        for name in [path.as_os_str().as_bytes(), &[path.as_os_str().as_bytes(), b"/x"].concat()] {
            asked.extend_from_slice(name);
            asked.push(0);
        }
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["check-ignore", "--no-index", "-z", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("run", "git check-ignore"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(&asked));
    let output = child.wait_with_output().map_err(Error::io("run", "git check-ignore"))?;
    let _ = writer.join();
    let ignored: std::collections::BTreeSet<&[u8]> =
        output.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()).collect();
    Ok(paths
        .iter()
        .filter(|path| {
            let name = path.as_os_str().as_bytes();
            !ignored.contains(name) && !ignored.contains(&[name, b"/x"].concat()[..])
        })
        .cloned()
        .collect())
}

/// From now on a shutdown signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) ends
/// the master: every step on it fails, the follower ends, and `up`
/// returns through its clean-up (the stand-in here undone) instead of
/// dying in the middle.
fn end_on_signal(connection: &SshMaster) -> Result<()> {
    let runtime = crate::session::runtime(false)?;
    let mut signals = {
        let _entered = runtime.enter();
        omnidev_core::signals::ShutdownSignals::new().map_err(Error::Runtime)?
    };
    let Ok(master) = i32::try_from(connection.master.id()) else {
        return Ok(());
    };
    let master = nix::unistd::Pid::from_raw(master);
    std::thread::Builder::new()
        .name("omnidev-signals".into())
        .spawn(move || {
            runtime.block_on(signals.recv());
            // Our own child: reaped only once `up` is done with it, and
            // this process ends right after.
            let _ = nix::sys::signal::kill(master, nix::sys::signal::SIGTERM);
        })
        .map_err(Error::Runtime)?;
    Ok(())
}

/// `script` run there so that it ends when the channel closes: its
/// standard input is a pipe held open here and read there by a watcher
/// that ends it at its end. (A background list of a shell without job
/// control reads /dev/null unless told otherwise: it reads the channel as
/// fd 3.)
fn ends_with_channel(script: &str) -> String {
    format!(
        "exec 3<&0; {{ cat <&3 >/dev/null 2>&1; kill $$ 2>/dev/null; }} >/dev/null 2>&1 & exec \
         {script} 3<&- </dev/null"
    )
}

/// `omnidev logs ARGS` of a pod of another host (`record`, while `up
/// --host` stands for it here): run there over the connection, its
/// output shown with control characters made visible (as `logs` does).
pub fn logs_there(record: &crate::control::RemoteRecord, args: &[String]) -> Result<ExitCode> {
    let Some((program, options)) = record.ssh.split_first() else {
        return Ok(ExitCode::FAILURE);
    };
    let words: Vec<String> = args.iter().map(|a| shell_word(a).into_owned()).collect();
    let script = format!(
        "{} logs --repo {} {}",
        shell_word(&record.omnidev),
        shell_word(&record.checkout),
        words.join(" ")
    );
    let mut command = Command::new(program);
    command
        .args(options)
        .arg(ends_with_channel(&script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    dies_with_us(&mut command);
    let host = RemoteHost::parse(&record.host).map_err(|message| Error::Remote {
        host: record.host.clone(),
        step: "read remote.json".to_owned(),
        message,
    })?;
    let mut child = command.spawn().map_err(|e| failed(&host, "read the logs", e.to_string()))?;
    let held_open = child.stdin.take();
    show_lines(std::io::BufReader::new(child.stdout.take().expect("piped")));
    drop(held_open);
    let status = child.wait().map_err(|e| failed(&host, "read the logs", e.to_string()))?;
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Writes each line of `reader` to stdout, control characters made
/// visible, lines of more than 64 KiB in pieces.
fn show_lines(mut reader: impl std::io::BufRead) {
    let mut line = Vec::new();
    let stdout = std::io::stdout();
    loop {
        line.clear();
        match (&mut reader).take(64 * 1024).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let mut out = stdout.lock();
                let _ = writeln!(out, "{}", visible(text.trim_end_matches('\n')));
            }
        }
    }
}

/// `omnidev stop --host`: stops this checkout's pod there, if it runs.
pub fn stop(host: &RemoteHost, repo: &Path, timeout: Duration) -> Result<ExitCode> {
    let connection = SshMaster::open(host, &private_runtime()?)?;
    let dir = checkout_there(repo);
    // Any build reads the pod's control socket; this one is brought when
    // missing, like `up`'s.
    let omnidev = omnidev_there(&connection, true)?.expect("installed");
    let stop = format!("stop --timeout {}", timeout.as_secs());
    let said =
        connection.run("stop the pod", &command_there(&omnidev, &stop, &dir), StdinOf::Nothing)?;
    for line in said.lines() {
        note!("{host}: {line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The runtime directory, private, for the master's socket.
fn private_runtime() -> Result<PathBuf> {
    let runtime = omnidev_pod::runtime::runtime_dir();
    omnidev_pod::runtime::ensure_private(&runtime)?;
    Ok(runtime)
}

/// Shows the pod's output until it ends, the connection drops or this
/// process is stopped. There the follower ends with the connection: its
/// standard input is a pipe held open here, whose end (sshd closes the
/// channel) stops it, so no `logs -f` is left waiting on the host.
fn follow(connection: &SshMaster, script: &str) -> Result<ExitCode> {
    let mut command = connection.ssh();
    command
        .arg(ends_with_channel(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    dies_with_us(&mut command);
    let mut logs =
        command.spawn().map_err(|e| failed(&connection.host, "follow the logs", e.to_string()))?;
    let held_open = logs.stdin.take();
    show_lines(std::io::BufReader::new(logs.stdout.take().expect("piped")));
    drop(held_open);
    // ssh's own failure (the connection lost) is 255; the follower there
    // ends by itself when the pod stops.
    if logs.wait().is_ok_and(|status| status.code() != Some(255)) {
        note!("omnidev: the pod on {} has stopped", connection.host);
    } else {
        note!("omnidev: the connection to {} ended; the pod goes on there", connection.host);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_and_refuse_what_ssh_would_take_for_options() {
        assert_eq!(
            RemoteHost::parse("dev@box.lan:2222"),
            Ok(RemoteHost { user: Some("dev".into()), name: "box.lan".into(), port: Some(2222) })
        );
        assert_eq!(
            RemoteHost::parse("box"),
            Ok(RemoteHost { user: None, name: "box".into(), port: None })
        );
        assert_eq!(
            RemoteHost::parse("dev@box.lan:2222").map(|h| h.to_string()),
            Ok("dev@box.lan:2222".into())
        );
        for bad in
            ["-oProxyCommand=x", "dev@-box", "box:0", "box:99999", "", "a b", "box;rm", "@box"]
        {
            let err = RemoteHost::parse(bad).expect_err(bad);
            assert!(err.contains('`'), "{bad}: {err}");
        }
    }

    #[test]
    fn the_checkout_there_is_named_by_machine_and_path() {
        let a = checkout_there(Path::new("/work/one/app"));
        let b = checkout_there(Path::new("/work/two/app"));
        assert!(a.starts_with(".cache/omnidev-host/checkouts/app-"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, checkout_there(Path::new("/work/one/app")));
        let odd = checkout_there(Path::new("/work/it's $(x)"));
        assert!(odd.chars().all(|c| c.is_ascii_alphanumeric() || "./_-".contains(c)), "{odd}");
    }

    #[test]
    fn the_files_sent_are_those_git_would_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path();
        let git = |args: &[&str]| {
            let ok = Command::new("git").arg("-C").arg(repo).args(args).output().expect("git");
            assert!(ok.status.success(), "{args:?}: {}", String::from_utf8_lossy(&ok.stderr));
        };
        git(&["init", "-q"]);
        std::fs::write(repo.join(".gitignore"), ".venv/\n").expect("write");
        std::fs::write(repo.join("kept.py"), "").expect("write");
        std::fs::write(repo.join("gone.py"), "").expect("write");
        git(&["add", "."]);
        std::fs::remove_file(repo.join("gone.py")).expect("rm");
        std::fs::write(repo.join("new.py"), "").expect("write");
        std::fs::create_dir(repo.join(".venv")).expect("mkdir");
        std::fs::write(repo.join(".venv/big"), "").expect("write");
        let list = files_to_send(repo, &[]).expect("list");
        let mut names: Vec<&[u8]> = list.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
        names.sort();
        assert_eq!(names, vec![&b".gitignore"[..], b"kept.py", b"new.py"]);
        // A burst of changes: only its own files, ignored ones left out;
        // of those gone, the ignored are not deleted there.
        let some = files_to_send(repo, &["new.py".into(), ".venv/big".into()]).expect("list");
        assert_eq!(some, b"new.py\0");
        let gone = not_ignored(repo, &[".venv/old".into(), ".venv".into(), "gone.py".into()])
            .expect("check");
        assert_eq!(gone, vec![PathBuf::from("gone.py")]);
    }
}
