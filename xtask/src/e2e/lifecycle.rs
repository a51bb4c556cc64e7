//! Cases: reload on a `.py` change, crash restart with backoff, signals, `kill -9`.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::{Ctx, SOON, UP, parse, send_signal};

/// The pid of the host that started last.
fn last_host_pid(pod: &super::Pod) -> Result<u32> {
    Ok(parse::host_starts(&pod.output()).last().context("no host start line")?.pid)
}

/// Wait until a host other than `old_host` starts after the `listening`
/// line of the server `new_server`; returns that start.
fn host_started_after(
    pod: &mut super::Pod,
    new_server: u32,
    old_host: u32,
) -> Result<parse::HostStart> {
    // The server may answer /health before its own line has made it
    // through omnidev's output: wait for the line.
    let after = pod.wait_output("the new server's listening line", UP, |out| {
        parse::listening_line(out, new_server)
    })?;
    pod.wait_output("the host to start again", UP, |out| {
        parse::host_starts(out)
            .into_iter()
            .find(|start| start.pid != old_host && start.line > after)
    })
}

/// Touching a `.py` file reloads the server, then the host (new pids, the
/// host once the new server is ready).
pub fn py_change_reloads_server_then_host(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &[])?;
    let (server, _) = pod.ready(UP)?;
    let old_host = last_host_pid(&pod)?;

    let source = repo.join("omnigent/server.py");
    let touched = Instant::now();
    writeln!(OpenOptions::new().append(true).open(&source)?, "# changed by the e2e")?;
    let new_server = pod.server(Some(server.pid), UP)?;
    let reload = touched.elapsed();
    let host = host_started_after(&mut pod, new_server.pid, old_host)?;
    ensure!(host.server_was_ready, "the reloaded host started before the new server was ready");
    ctx.note(format!("write -> new server answering /health: {:.2}s", reload.as_secs_f64()));
    pod.stop_with("INT", ctx)?;
    Ok(())
}

/// Killing the server's process restarts it after a backoff, and the host
/// after it.
pub fn killed_server_restarts_with_backoff(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &[])?;
    let (server, _) = pod.ready(UP)?;
    let old_host = last_host_pid(&pod)?;

    send_signal(server.pid, "KILL")?;
    let killed = Instant::now();
    let new_server = pod.server(Some(server.pid), UP)?;
    let back = killed.elapsed();
    // The first backoff is 1 s: coming back faster means there was none.
    ensure!(
        back >= Duration::from_millis(900),
        "the server came back {:.2}s after the crash: no backoff",
        back.as_secs_f64()
    );
    ensure!(
        omnidev_core::platform::stat(server.pid).is_none(),
        "the killed server pid {} still exists",
        server.pid
    );
    let host = host_started_after(&mut pod, new_server.pid, old_host)?;
    ensure!(host.server_was_ready, "the restarted host started before the server was ready");
    ctx.note(format!("crash -> server answering again: {:.2}s", back.as_secs_f64()));
    pod.stop_with("INT", ctx)?;
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP each shut the pod down completely.
pub fn sigint_sigterm_sighup_leave_no_process(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    for signal in ["INT", "TERM", "HUP"] {
        let mut pod = ctx.up(&repo, &[])?;
        let (server, vite) = pod.ready(UP)?;
        let processes = ctx.pod_processes().len();
        ensure!(processes >= 4, "only {processes} processes of the pod found before SIG{signal}");
        pod.stop_with(signal, ctx).with_context(|| format!("after SIG{signal}"))?;
        ensure!(!crate::util::port_open(server.port), "server port still open after SIG{signal}");
        ensure!(!crate::util::port_open(vite), "vite port still open after SIG{signal}");
    }
    Ok(())
}

/// `kill -9` of omnidev: no process of the pod is left 2 s later, and the
/// next start works.
pub fn kill9_of_omnidev_leaves_no_process_within_2s(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &[])?;
    pod.ready(UP)?;
    pod.signal("KILL")?;
    let killed = Instant::now();
    pod.wait_exit(SOON)?;
    ctx.wait_no_pod_process(Duration::from_secs(2).saturating_sub(killed.elapsed()))
        .context("within 2 s of kill -9")?;
    ctx.note(format!("all gone after {:.2}s", killed.elapsed().as_secs_f64()));

    let mut pod = ctx.up(&repo, &[])?;
    pod.ready(UP).context("starting again after kill -9")?;
    pod.stop_with("INT", ctx)?;
    Ok(())
}

/// The pod's orphan guard: the tagged process called `omnidev-guard`.
fn guard_of_pod(ctx: &Ctx) -> Option<u32> {
    ctx.pod_processes()
        .into_iter()
        .map(|(pid, _)| pid)
        .find(|pid| omnidev_core::platform::name(*pid).is_some_and(|name| name == "omnidev-guard"))
}

/// Kill the orphan guard alone: omnidev says so and starts a new one at
/// once; a `kill -9` of omnidev afterwards still leaves no process of the
/// pod, with cgroups and with process groups.
pub fn killed_guard_is_replaced_then_kill9_leaves_no_process(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    for containment in ["auto", "process-groups"] {
        let mut command = ctx.omnidev();
        command
            .args(["up", "--headless", "--repo"])
            .arg(&repo)
            .env("OMNIDEV_CONTAINMENT", containment);
        let mut pod = ctx.spawn_pod(command, &repo)?;
        pod.ready(UP)?;
        let old = crate::util::wait_for("the pod's guard", SOON, || Ok(guard_of_pod(ctx)))?;
        send_signal(old, "KILL")?;
        let prefix =
            format!("the orphan guard (pid {old}) ended (killed by SIGKILL); a new one (pid ");
        let new = pod
            .wait_output("omnidev to replace its guard", SOON, |out| {
                let line = out.lines().find(|l| l.contains(&prefix))?;
                let rest = &line[line.find(&prefix)? + prefix.len()..];
                rest.split(')').next()?.parse::<u32>().ok()
            })
            .with_context(|| format!("after kill -9 of the guard ({containment})"))?;
        // Announced once forked: the new guard names itself a moment
        // later, when it first runs.
        crate::util::wait_for("the announced guard", SOON, || {
            Ok((guard_of_pod(ctx) == Some(new)).then_some(()))
        })
        .with_context(|| {
            format!("the pod's guard is not the announced pid {new} ({containment})")
        })?;
        pod.signal("KILL")?;
        let killed = Instant::now();
        pod.wait_exit(SOON)?;
        ctx.wait_no_pod_process(SOON).with_context(|| {
            format!("after kill -9 of omnidev with the new guard ({containment})")
        })?;
        ctx.note(format!(
            "{containment}: guard {old} replaced by {new}; all gone {:.2}s after kill -9",
            killed.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}
