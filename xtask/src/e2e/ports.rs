//! Cases: ports and the control socket that are provably the pod's own —
//! a foreign server taking the pod's port before the server binds it,
//! six checkouts of six cache roots at once, and a control socket for a
//! pod directory too long for a socket address.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use anyhow::{Context, Result, bail, ensure};

use super::control::{omnidev_ok, pod_dir, service_state, status_stopped};
use super::{Ctx, SOON, UP, parse};
use crate::util;

/// The ports recorded in the only `pod.toml` under `cache_home`, by name.
fn recorded_ports(cache_home: &Path) -> Vec<(String, u16)> {
    let Ok(pods) = std::fs::read_dir(cache_home.join("omnidev")) else {
        return Vec::new();
    };
    pods.filter_map(std::result::Result::ok)
        .find_map(|pod| std::fs::read_to_string(pod.path().join("pod.toml")).ok())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (name, port) = line.split_once(" = ")?;
            Some((name.to_owned(), port.trim().parse().ok()?))
        })
        .collect()
}

/// The server port recorded in the only `pod.toml` under `cache_home`.
fn recorded_server_port(cache_home: &Path) -> Option<u16> {
    recorded_ports(cache_home)
        .into_iter()
        .find_map(|(name, port)| (name == "server").then_some(port))
}

/// A child killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A foreign `python3 -m http.server` answering 200 on the port the pod
/// allocated for its server, started after the allocation and before the
/// server binds (the example's server boots slowly here): the host is not
/// started against it, omnidev names the holder, moves the server to a
/// new port, and the pod comes up healthy on its own server.
pub fn foreign_server_on_the_pod_port_is_not_ready_and_the_port_moves(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut command = ctx.omnidev();
    command
        .args(["up", "--headless", "--no-vite", "--repo"])
        .arg(&repo)
        .env("OMNIGENT_EXAMPLE_BOOT_DELAY", "6");
    let mut pod = ctx.spawn_pod(command, &repo)?;
    let cache_home = ctx.cache_home();
    let lost = util::wait_for("the pod to allocate its ports", SOON, || {
        Ok(recorded_server_port(&cache_home))
    })?;

    // A directory whose `health` file makes GET /health answer 200.
    let docroot = ctx.dir.join("foreign");
    std::fs::create_dir_all(&docroot)?;
    std::fs::write(docroot.join("health"), "{\"status\": \"ok\"}\n")?;
    let foreign = ctx
        .command_with_subtag("python3", "foreign")
        .args(["-m", "http.server", &lost.to_string(), "--bind", "127.0.0.1"])
        .arg("--directory")
        .arg(&docroot)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("python3 -m http.server")?;
    let foreign = Reaped(foreign);
    let foreign_pid = foreign.0.id();
    util::wait_for("the foreign server to answer", SOON, || {
        Ok(util::http_get(lost, "/health").ok().filter(|(code, _)| *code == 200).map(|_| ()))
    })?;
    ensure!(
        parse::listening(&pod.output()).is_empty(),
        "the pod's server bound before the foreign one; the boot delay is too short"
    );

    let held = format!("port {lost} is held by pid {foreign_pid} (");
    pod.wait_output("omnidev to name the holder", UP, |out| {
        out.lines().find(|l| l.contains(&held) && l.contains("not by server")).map(str::to_owned)
    })?;
    let moved = pod.wait_output("the server to move", UP, |out| {
        let line =
            out.lines().find(|l| l.contains(&format!("moved server from port {lost} to port ")))?;
        line.rsplit(' ').next()?.parse::<u16>().ok()
    })?;
    ensure!(moved != lost, "moved to the same port");
    let server = pod.ready_backend(UP)?;
    ensure!(
        server.port == moved,
        "the server listens on {}, not on the new port {moved}",
        server.port
    );
    let out = pod.output();
    let starts = parse::host_starts(&out);
    ensure!(
        !starts.is_empty()
            && starts.iter().all(|s| s.server_was_ready
                && s.line > parse::listening_line(&out, server.pid).unwrap_or(usize::MAX)),
        "the host started before the pod's own server was ready: {starts:?}\n{out}"
    );
    ensure!(
        out.lines().filter(|l| l.contains(&held)).count() == 1,
        "the holder is named more than once:\n{out}"
    );
    // The URL printed once the server is ready is the new one.
    let url_line = pod.wait_output("the server's URL", SOON, |out| {
        out.lines()
            .find(|l| l.starts_with("omnidev") && l.contains("server http://localhost:"))
            .map(str::to_owned)
    })?;
    ensure!(
        url_line.ends_with(&format!("http://localhost:{moved}")),
        "headless printed `{url_line}` after the server moved to port {moved}"
    );
    let (code, body) = util::http_get(moved, "/health")?;
    ensure!(
        code == 200 && body.contains(&format!("\"pid\": {}", server.pid)),
        "/health on the new port: {code} {body}"
    );
    ensure!(
        recorded_server_port(&cache_home) == Some(moved),
        "pod.toml does not record the new port"
    );
    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(
        status.contains(&format!("\"server\": {moved}"))
            && status.contains(&format!("http://localhost:{moved}")),
        "status does not show the new port:\n{status}"
    );
    drop(foreign);
    let code = pod.stop_with("TERM", ctx)?;
    ensure!(code.success(), "omnidev exited with {code}");
    ctx.wait_no_pod_process(SOON)
}

/// Six checkouts, each with its own `XDG_CACHE_HOME`, started at the same
/// instant: every port distinct, every pod healthy.
pub fn six_cache_roots_at_once_get_distinct_ports(ctx: &mut Ctx) -> Result<()> {
    let mut pods = Vec::new();
    let mut repos = Vec::new();
    for i in 0..6 {
        let repo = ctx.checkout(&format!("r{i}"))?;
        let cache: PathBuf = ctx.dir.join(format!("cache{i}"));
        std::fs::create_dir_all(&cache)?;
        repos.push((repo, cache));
    }
    for (repo, cache) in &repos {
        let mut command = ctx.omnidev();
        // The backend only: six pnpm installs at once would only slow the
        // machine; the vite port is allocated (and checked) all the same.
        command
            .args(["up", "--headless", "--no-vite", "--repo"])
            .arg(repo)
            .env("XDG_CACHE_HOME", cache);
        pods.push(ctx.spawn_pod(command, repo)?);
    }
    let mut ports = std::collections::BTreeSet::new();
    for (pod, (_, cache)) in pods.iter_mut().zip(&repos) {
        let server = pod.ready_backend(UP)?;
        let recorded = recorded_ports(cache);
        ensure!(recorded.len() == 2, "pod.toml under {}: {recorded:?}", cache.display());
        ensure!(
            recorded.contains(&("server".to_owned(), server.port)),
            "the server listens on {}, pod.toml says {recorded:?}",
            server.port
        );
        for (_, port) in recorded {
            if !ports.insert(port) {
                bail!("port {port} was given to two pods:\n{}", pod.output());
            }
        }
        let (code, _) = util::http_get(server.port, "/health")?;
        ensure!(code == 200, "GET /health answered {code}");
    }
    ctx.note(format!("12 distinct ports: {ports:?}"));
    for pod in &pods {
        pod.signal("TERM")?;
    }
    for mut pod in pods {
        let code = pod.wait_exit(SOON)?;
        ensure!(code.success(), "omnidev exited with {code}");
    }
    ctx.wait_no_pod_process(SOON)
}

/// Longest `sun_path` on Linux, the NUL included.
const SUN_PATH: usize = 108;

/// A checkout named like a long branch, so that `<pod>/control.sock`
/// would not fit a socket address: `up --detach`, `status` and `stop`
/// work, through the pointer in the pod directory.
pub fn long_pod_path_detach_status_stop(ctx: &mut Ctx) -> Result<()> {
    let name = format!("wt-{}", "feature-branch-with-a-long-descriptive-name-".repeat(3));
    let repo = ctx.checkout(&name)?;
    let out = omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP)?;
    ensure!(out.contains("server http://localhost:"), "{out}");

    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(status.contains("\"running\": true"), "{status}");
    ensure!(status.contains("\"control\": true"), "{status}");
    let dir = pod_dir(&status)?;
    let pointer = dir.join("control.sock");
    let length = pointer.as_os_str().as_bytes().len();
    ensure!(
        length >= SUN_PATH,
        "the pod path is not long enough for this case ({length} bytes): {}",
        pointer.display()
    );
    let socket = std::fs::read_link(&pointer)
        .with_context(|| format!("{} is not a pointer to the socket", pointer.display()))?;
    ensure!(
        socket.starts_with(ctx.runtime_home()) && socket.as_os_str().len() < SUN_PATH,
        "the socket {} is not a short path in the runtime directory",
        socket.display()
    );
    ensure!(service_state(&status, "server")? == "ready", "server is not ready:\n{status}");

    omnidev_ok(ctx, &repo, &["stop"], UP)?;
    let status = status_stopped(ctx, &repo, &["--json"], SOON)?;
    ensure!(status.contains("\"running\": false"), "{status}");
    ensure!(
        std::fs::symlink_metadata(&pointer).is_err() && !socket.exists(),
        "the socket or its pointer was left after stop"
    );
    ctx.wait_no_pod_process(SOON)
}
