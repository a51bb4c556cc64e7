//! Case: `omnidev up --host` against a real OpenSSH server. The host is
//! Debian's sshd in a network namespace of the case's own (so the pod's
//! ports there and their forwards here are the same numbers on two
//! loopbacks), serving an unprivileged user `omnidev-host` (made when
//! missing, its home in a directory of the case's) who knows nothing of
//! omnidev: `up --host` brings the binary and the checkout (with an
//! uncommitted file), the URL answers here, stopping the local omnidev
//! leaves the pod running there and no follower of it, `up --host` again
//! reconnects, and `stop --host` leaves no process of the user.
//! Needs root (the namespace, the user, sshd).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use anyhow::{Context, Result, bail, ensure};

use super::{Ctx, SOON, UP, send_signal};
use crate::ssh_host::{SshHost, user_processes};
use crate::util;

/// The checkout: a web server on its port, one file committed and one not.
fn checkout(ctx: &Ctx) -> Result<PathBuf> {
    let repo = ctx.dir.join("remote-app");
    fs::create_dir_all(&repo)?;
    fs::write(
        repo.join("omnidev.toml"),
        "[ports]\nweb = 18760\n\n[services.web]\n\
         command = [\"python3\", \"-m\", \"http.server\", \"{port.web}\", \"--bind\", \"127.0.0.1\"]\n\
         ready = { http = \"http://127.0.0.1:{port.web}/committed.txt\" }\n\
         watch = [\"*.txt\"]\n",
    )?;
    fs::write(repo.join("committed.txt"), "committed\n")?;
    for args in [&["init", "-q", "-b", "main"][..], &["add", "-A"], &["commit", "-q", "-m", "app"]]
    {
        let status = ctx.command("git").args(args).current_dir(&repo).status()?;
        ensure!(status.success(), "git {args:?} failed");
    }
    fs::write(repo.join("uncommitted.txt"), "made here, not committed\n")?;
    Ok(repo)
}

/// `omnidev up --host omnihost` in `repo`, in the background; the port it
/// forwarded, once it says so.
fn up_host(ctx: &mut Ctx, host: &SshHost, repo: &Path) -> Result<(Child, u16, PathBuf)> {
    let out = ctx.output_file("up-host");
    let file = fs::File::create(&out)?;
    let child = ctx
        .omnidev()
        .args(["up", "--host", "omnihost"])
        .current_dir(repo)
        .env("OMNIDEV_SSH", &host.ssh)
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()?;
    let port = util::wait_for("`up --host` to forward the pod's port", UP, || {
        let text = fs::read_to_string(&out)?;
        if text.contains("omnidev::") {
            bail!("`up --host` failed:\n{text}");
        }
        Ok(text.lines().find_map(|line| {
            let ports = line.split_once("its ports [")?.1.split_once(']')?.0;
            ports.trim().parse::<u16>().ok()
        }))
    })?;
    Ok((child, port, out))
}

/// `omnidev ARGS --json`-style output of the local omnidev in `repo`, as
/// JSON.
fn json_of(ctx: &mut Ctx, repo: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let mut command = ctx.omnidev();
    command.args(args).current_dir(repo).stderr(Stdio::null());
    // (`status` of a pod that does not run exits 3, and says so.)
    let output = command.output()?;
    serde_json::from_slice(&output.stdout)
        .with_context(|| format!("omnidev {args:?} ({}) printed no JSON", output.status))
}

/// The web service's pid, as the local `status --json` says.
fn web_pid(ctx: &mut Ctx, repo: &Path) -> Result<u64> {
    let status = json_of(ctx, repo, &["status", "--json"])?;
    status["services"][0]["pid"].as_u64().with_context(|| format!("no pid in {status}"))
}

pub fn up_host_over_real_sshd(ctx: &mut Ctx) -> Result<()> {
    let host = SshHost::start()?;
    let repo = checkout(ctx)?;
    let (mut up, port, _) = up_host(ctx, &host, &repo)?;
    for (file, text) in [("committed.txt", "committed"), ("uncommitted.txt", "made here")] {
        let (status, body) = util::http_get(port, &format!("/{file}"))?;
        ensure!(status == 200 && body.contains(text), "GET /{file} here: {status} {body:?}");
    }
    ctx.note(format!("the pod's port {port} answers here through the forward"));
    // The commands of this machine reach the pod there through its
    // forwarded control socket.
    let status = json_of(ctx, &repo, &["status", "--json"])?;
    ensure!(
        status["host"] == "omnihost" && status["running"] == true,
        "local status of the pod there: {status}"
    );
    let list = json_of(ctx, &repo, &["ls", "--json"])?;
    ensure!(
        list["pods"].as_array().is_some_and(|pods| pods.iter().any(|p| p["host"] == "omnihost")),
        "`ls` names no pod on omnihost: {list}"
    );
    let (waited, said) = ctx.run_omnidev(
        &["wait", "--ready", "--timeout", "30", "--repo", &repo.display().to_string()],
        SOON,
    )?;
    ensure!(waited.success(), "`wait --ready` through the forward: {said}");
    let before = web_pid(ctx, &repo)?;
    let (restarted, said) =
        ctx.run_omnidev(&["restart", "web", "--repo", &repo.display().to_string()], SOON)?;
    ensure!(restarted.success(), "`restart web` through the forward: {said}");
    let after = web_pid(ctx, &repo)?;
    ensure!(before != after, "`restart web` left pid {before}");
    // An edit here reaches the checkout there, whose pod reloads for it;
    // a file deleted here goes there too.
    fs::write(repo.join("committed.txt"), "edited here\n")?;
    fs::remove_file(repo.join("uncommitted.txt"))?;
    util::wait_for("the edit to be served there", UP, || {
        let (_, body) = util::http_get(port, "/committed.txt").unwrap_or_default();
        Ok(body.contains("edited here").then_some(()))
    })?;
    util::wait_for("the pod there to reload for it", UP, || {
        Ok(web_pid(ctx, &repo).ok().filter(|pid| *pid != after))
    })?;
    let (read, said) =
        ctx.run_omnidev(&["logs", "web", "--repo", &repo.display().to_string()], SOON)?;
    ensure!(
        read.success() && said.contains("GET /committed.txt"),
        "`logs web` here shows the server's lines there ({read}):\n{said}"
    );
    util::wait_for("the deletion to reach there", SOON, || {
        Ok(util::http_get(port, "/uncommitted.txt")
            .is_ok_and(|(code, _)| code == 404)
            .then_some(()))
    })?;
    // The local omnidev stopped: its ssh goes, the pod stays there, and
    // no follower of its logs is left waiting on the host.
    send_signal(up.id(), "TERM")?;
    util::wait_for("`up --host` to exit", SOON, || Ok(up.try_wait()?))?;
    util::wait_for("the forward to close", SOON, || {
        Ok(util::http_get(port, "/committed.txt").is_err().then_some(()))
    })?;
    util::wait_for("the follower there to end", SOON, || {
        let left = user_processes()?;
        Ok((!left.iter().any(|p| p.contains("logs -f"))).then_some(left))
    })
    .and_then(|left| {
        ensure!(
            left.iter().any(|p| p.contains("http.server")),
            "the pod's server went with the connection: {left:?}"
        );
        Ok(())
    })?;
    let status = json_of(ctx, &repo, &["status", "--json"])?;
    ensure!(status["running"] == false, "no `up --host` stands for it, yet: {status}");
    let here = PathBuf::from(status["pod-dir"].as_str().context("a pod-dir")?);
    ensure!(
        !here.join("remote.json").exists() && !here.join("control.sock").exists(),
        "the stand-in here was not undone at SIGTERM: {}",
        here.display()
    );
    // Again: the running pod is found and forwarded; `stop` here stops it
    // there, and the `up --host` standing for it ends.
    let (mut again, port_again, out_again) = up_host(ctx, &host, &repo)?;
    ensure!(port_again == port, "the port moved from {port} to {port_again}");
    let (status, _) = util::http_get(port, "/committed.txt")?;
    ensure!(status == 200, "GET after reconnecting: {status}");
    let said = fs::read_to_string(&out_again)?;
    ensure!(said.contains("already running"), "the second `up --host` started anew:\n{said}");
    let (stopped, said) =
        ctx.run_omnidev(&["stop", "--repo", &repo.display().to_string()], SOON)?;
    ensure!(stopped.success(), "`stop` through the forward: {said}");
    util::wait_for("`up --host` to end with its pod", SOON, || Ok(again.try_wait()?))?;
    wait_no_user_process()?;
    // A third time, stopped from here while not connected: `stop --host`.
    let (mut third, _, _) = up_host(ctx, &host, &repo)?;
    send_signal(third.id(), "TERM")?;
    util::wait_for("the third `up --host` to exit", SOON, || Ok(third.try_wait()?))?;
    let mut stop = ctx.omnidev();
    stop.args(["stop", "--host", "omnihost"]).current_dir(&repo).env("OMNIDEV_SSH", &host.ssh);
    let (status, said) = ctx.run_to_end(stop, "stop-host", SOON)?;
    ensure!(status.success(), "`stop --host` failed ({status}):\n{said}");
    wait_no_user_process()
}

/// Waits until the host user runs nothing (sshd's own aside).
fn wait_no_user_process() -> Result<()> {
    util::wait_for("no process of the host user", SOON, || {
        Ok(user_processes()?.is_empty().then_some(()))
    })
    .with_context(|| format!("left: {:?}", user_processes().unwrap_or_default()))
}
