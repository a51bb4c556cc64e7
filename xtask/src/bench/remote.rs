//! What a pod on another host costs (`up --host`, #86): the time from
//! `up --host` to its ports forwarded and the pod ready, beside `up
//! --detach` of the same checkout here, and the latency of `status`
//! through the forwarded control socket beside a pod's own. The host is
//! the e2e case's real sshd in a network namespace ([`SshHost`]): the
//! network is a veth pair, so the figures are omnidev's and ssh's own
//! work, not a network's.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use super::{Row, median, millis};
use crate::ssh_host::SshHost;

/// Rounds of each: the first `up --host` also copies the binary there.
const ROUNDS: usize = 3;
/// `status` calls timed on each side.
const CALLS: usize = 20;

/// A checkout serving a file on its port, committed.
fn checkout(dir: &Path) -> Result<std::path::PathBuf> {
    let repo = dir.join("app");
    fs::create_dir_all(&repo)?;
    fs::write(
        repo.join("omnidev.toml"),
        "[ports]\nweb = 18790\n\n[services.web]\n\
         command = [\"python3\", \"-m\", \"http.server\", \"{port.web}\", \"--bind\", \"127.0.0.1\"]\n\
         ready = { http = \"http://127.0.0.1:{port.web}/index.html\" }\n",
    )?;
    fs::write(repo.join("index.html"), "hello\n")?;
    for args in [&["init", "-q", "-b", "main"][..], &["add", "-A"], &["commit", "-q", "-m", "app"]]
    {
        let output = Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(&repo)
            .output()?;
        ensure!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(repo)
}

/// `omnidev` in `repo` with the bench's own homes under `dir`.
fn omnidev(omnidev: &Path, dir: &Path, repo: &Path, host: &SshHost) -> Command {
    let mut command = Command::new(omnidev);
    command
        .current_dir(repo)
        .env("XDG_CACHE_HOME", dir.join("home/.cache"))
        .env("XDG_CONFIG_HOME", dir.join("home/.config"))
        .env("XDG_RUNTIME_DIR", dir.join("run"))
        .env("OMNIDEV_SSH", &host.ssh)
        .stdin(Stdio::null());
    command
}

fn quiet(mut command: Command, what: &str) -> Result<()> {
    let output = command.stdout(Stdio::null()).output()?;
    ensure!(output.status.success(), "{what}: {}", String::from_utf8_lossy(&output.stderr));
    Ok(())
}

/// One `up --host` to its ports forwarded and the pod ready (it waits for
/// readiness there first), and the median `status` through it; then
/// ended here and stopped there.
fn up_host(bin: &Path, dir: &Path, repo: &Path, host: &SshHost) -> Result<(Duration, Duration)> {
    let err = dir.join("up-host.err");
    let started = Instant::now();
    let mut child = omnidev(bin, dir, repo, host)
        .args(["up", "--host", "omnihost"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&err)?)
        .spawn()?;
    let took = loop {
        let said = fs::read_to_string(&err).unwrap_or_default();
        if said.contains("answer on 127.0.0.1 here") {
            break started.elapsed();
        }
        if child.try_wait()?.is_some() || started.elapsed() > Duration::from_mins(2) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`up --host` did not connect: {said}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let status = status_calls(bin, dir, repo, host)?;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).context("pid")?),
        nix::sys::signal::SIGTERM,
    );
    child.wait()?;
    let mut stop = omnidev(bin, dir, repo, host);
    stop.args(["stop", "--host", "omnihost"]);
    quiet(stop, "stop --host")?;
    Ok((took, status))
}

/// The median of [`CALLS`] `status --json` runs against the running pod.
fn status_calls(bin: &Path, dir: &Path, repo: &Path, host: &SshHost) -> Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        let mut status = omnidev(bin, dir, repo, host);
        status.args(["status", "--json"]);
        quiet(status, "status")?;
        times.push(started.elapsed());
    }
    Ok(median(times))
}

/// The two rows.
pub(super) fn rows(bin: &Path, dir: &Path) -> Vec<Row> {
    let figures = (|| -> Result<[(String, String); 2]> {
        let host = SshHost::start()?;
        fs::create_dir_all(dir.join("run"))?;
        fs::set_permissions(dir.join("run"), std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let repo = checkout(dir)?;
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        let mut cold = Duration::ZERO;
        let (mut local_status, mut remote_status) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let started = Instant::now();
            let mut up = omnidev(bin, dir, &repo, &host);
            up.args(["up", "--detach"]);
            quiet(up, "up --detach")?;
            local.push(started.elapsed());
            local_status.push(status_calls(bin, dir, &repo, &host)?);
            let mut stop = omnidev(bin, dir, &repo, &host);
            stop.arg("stop");
            quiet(stop, "stop")?;
            let (took, status) = up_host(bin, dir, &repo, &host)?;
            if round == 0 {
                cold = took;
            } else {
                remote.push(took);
            }
            remote_status.push(status);
        }
        Ok([
            (
                format!(
                    "{} (first, with the binary copied: {})",
                    millis(median(remote)),
                    millis(cold)
                ),
                format!("`up --detach` here: {} ({ROUNDS} rounds, medians)", millis(median(local))),
            ),
            (
                millis(median(remote_status)),
                format!(
                    "`status` of a pod here: {} (medians of {CALLS} calls)",
                    millis(median(local_status))
                ),
            ),
        ])
    })();
    let names = ["up --host: to ready and forwarded", "up --host: `status` through the forward"];
    match figures {
        Ok(figures) => names
            .into_iter()
            .zip(figures)
            .map(|(name, (figure, reference))| Row { name, figure: Ok(figure), reference })
            .collect(),
        Err(e) => names
            .into_iter()
            .map(|name| Row {
                name,
                figure: Err(anyhow::anyhow!("{e:#}")),
                reference: "(not measured: needs root and sshd, as the e2e case)".to_owned(),
            })
            .collect(),
    }
}
