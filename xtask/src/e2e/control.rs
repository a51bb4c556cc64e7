//! Cases: driving a detached example pod from outside — `up --detach`,
//! `status`, `logs`, `restart`, `stop`, `ls`, `clean`, socket modes and a
//! stale socket after SIGKILL.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::{Ctx, SOON, UP, send_signal};
use crate::util;

/// `omnidev <args> --repo <repo>`, expected to succeed; its output.
pub(super) fn omnidev_ok(
    ctx: &mut Ctx,
    repo: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<String> {
    let (status, out) = omnidev(ctx, repo, args, timeout)?;
    ensure!(status.success(), "omnidev {args:?} failed ({status}):\n{out}");
    Ok(out)
}

/// `omnidev status <args> --repo <repo>` of a pod that does not run:
/// the report, with exit 3 (docs/control.md).
pub(super) fn status_stopped(
    ctx: &mut Ctx,
    repo: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<String> {
    let mut all = vec!["status"];
    all.extend(args);
    let (status, out) = omnidev(ctx, repo, &all, timeout)?;
    ensure!(
        status.code() == Some(NOT_RUNNING),
        "omnidev {all:?} of a stopped pod must exit {NOT_RUNNING} ({status}):\n{out}"
    );
    Ok(out)
}

/// The exit code of a command on a pod that does not run.
const NOT_RUNNING: i32 = 3;

pub(super) fn omnidev(
    ctx: &mut Ctx,
    repo: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<(ExitStatus, String)> {
    let repo = repo.to_str().context("non-UTF-8 checkout path")?;
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--repo", repo]);
    ctx.run_omnidev(&all, timeout)
}

/// The JSON text of a service in `status --json` output, from its name on.
fn service<'s>(status: &'s str, name: &str) -> Result<&'s str> {
    let needle = format!("\"name\": \"{name}\"");
    let at = status.find(&needle).with_context(|| format!("no service {name} in:\n{status}"))?;
    Ok(&status[at..])
}

/// A service's pid in `status --json` output (`None` for `null`).
pub(super) fn service_pid(status: &str, name: &str) -> Result<Option<u32>> {
    let value = util::json_field(service(status, name)?, "pid").context("no pid")?;
    Ok(value.parse().ok())
}

pub(super) fn service_state(status: &str, name: &str) -> Result<String> {
    util::json_field(service(status, name)?, "state").context("no state")
}

/// The pod directory in `status --json` output.
pub(super) fn pod_dir(status: &str) -> Result<PathBuf> {
    Ok(util::json_field(status, "pod-dir").context("no pod-dir")?.into())
}

fn supervisor_pid(status: &str) -> Result<u32> {
    util::json_field(status, "pid")
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no supervisor pid in:\n{status}"))
}

/// `up --detach` returns after readiness with the URLs; `status --json`
/// lists every service with pid and state; `logs server -n 5` prints five
/// lines; `logs -f` follows; `restart server` gives a new server pid and
/// the host restarts after it; `stop` ends every process and `status` then
/// says stopped.
pub fn detach_status_logs_restart_stop(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let started = Instant::now();
    let out = omnidev_ok(ctx, &repo, &["up", "--detach"], UP)?;
    ctx.note(format!("detach ready in {:.1}s", started.elapsed().as_secs_f64()));
    for url in ["ui http://localhost:", "server http://localhost:"] {
        ensure!(out.contains(url), "`up --detach` printed no `{url}`:\n{out}");
    }

    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(status.contains("\"running\": true"), "{status}");
    for name in ["server", "host", "vite"] {
        ensure!(service_pid(&status, name)?.is_some(), "{name} has no pid:\n{status}");
        let state = service_state(&status, name)?;
        ensure!(state == "ready" || state == "running", "{name} is {state}:\n{status}");
    }
    let server = service_pid(&status, "server")?.context("server pid")?;
    let host = service_pid(&status, "host")?.context("host pid")?;
    let port: u16 = util::json_field(&status, "server")
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no server port in:\n{status}"))?;
    let (code, _) = util::http_get(port, "/health")?;
    ensure!(code == 200, "GET /health answered {code}");

    let tail = omnidev_ok(ctx, &repo, &["logs", "server", "-n", "5"], SOON)?;
    ensure!(tail.lines().count() == 5, "`logs server -n 5` printed:\n{tail}");

    // `logs -f` prints a request the server logs after it started.
    let follow_out = ctx.output_file("logs-follow");
    let file = std::fs::File::create(&follow_out)?;
    let mut follow = ctx.command_with_subtag(ctx.omnidev_path(), "follow");
    follow
        .args(["logs", "server", "-f", "--repo"])
        .arg(&repo)
        .stdout(file.try_clone()?)
        .stderr(file);
    let mut follow = follow.spawn().context("spawning logs -f")?;
    let followed = util::wait_for("`logs -f` to show a new request", SOON, || {
        let _ = util::http_get(port, "/env");
        let text = std::fs::read_to_string(&follow_out).unwrap_or_default();
        Ok(text.contains("GET /env").then_some(()))
    });
    let _ = follow.kill();
    let _ = follow.wait();
    followed?;

    let restarted = omnidev_ok(ctx, &repo, &["restart", "server", "--json"], UP)?;
    let new_server = service_pid(&restarted, "server")?.context("no server pid")?;
    ensure!(new_server != server, "server pid unchanged after restart");
    util::wait_for("the host to restart after the server", UP, || {
        let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
        Ok(service_pid(&status, "host")?.filter(|pid| *pid != host).map(|_| ()))
    })?;
    let host_log = pod_dir(&status)?.join("logs/host.log");
    util::wait_for("host.log to show the host's second start", UP, || {
        let log = std::fs::read_to_string(&host_log).unwrap_or_default();
        Ok((util::strip_ansi(&log).matches("omnigent-host: started").count() >= 2).then_some(()))
    })?;

    let stopping = Instant::now();
    omnidev_ok(ctx, &repo, &["stop"], SOON)?;
    ctx.note(format!("stop took {:.2}s", stopping.elapsed().as_secs_f64()));
    ctx.wait_no_pod_process(Duration::from_secs(2)).context("after `omnidev stop` returned")?;
    let text = status_stopped(ctx, &repo, &[], SOON)?;
    ensure!(text.contains("not running"), "{text}");
    let status = status_stopped(ctx, &repo, &["--json"], SOON)?;
    ensure!(status.contains("\"running\": false"), "{status}");
    for name in ["server", "host", "vite"] {
        ensure!(service_state(&status, name)? == "stopped", "{status}");
    }
    Ok(())
}

/// `ls --json` lists two running pods of two checkouts with their ports and
/// one stopped pod.
pub fn ls_two_running_one_stopped(ctx: &mut Ctx) -> Result<()> {
    let repos = [ctx.checkout("a")?, ctx.checkout("b")?, ctx.checkout("c")?];
    for repo in &repos {
        omnidev_ok(ctx, repo, &["up", "--detach", "--no-vite"], UP)?;
    }
    omnidev_ok(ctx, &repos[2], &["stop"], SOON)?;
    let (status, list) = ctx.run_omnidev(&["ls", "--json"], SOON)?;
    ensure!(status.success(), "ls --json failed:\n{list}");
    let mut ports = Vec::new();
    for (repo, running) in repos.iter().zip([true, true, false]) {
        let needle = format!("\"repo\": \"{}\"", repo.display());
        let at = list
            .find(&needle)
            .with_context(|| format!("{} not listed:\n{list}", repo.display()))?;
        let entry = &list[at..];
        let flag = util::json_field(entry, "running").context("no running")?;
        ensure!(flag == running.to_string(), "{} running={flag}:\n{list}", repo.display());
        let pid = util::json_field(entry, "pid").context("no pid")?;
        ensure!((pid != "null") == running, "pid {pid}:\n{list}");
        ports.push(util::json_field(entry, "server").context("no server port")?);
    }
    ports.sort();
    ports.dedup();
    ensure!(ports.len() == 3, "ports shared between pods:\n{list}");
    for repo in &repos[..2] {
        omnidev_ok(ctx, repo, &["stop"], SOON)?;
    }
    ctx.wait_no_pod_process(SOON)
}

/// The socket and `state.json` are owner-only; after a SIGKILL of the
/// supervisor the stale socket is detected (`status` says not running at
/// once) and replaced by the next `up`; `clean` refuses while the pod runs
/// and removes only the pod directory otherwise.
pub fn control_socket_modes_stale_socket_clean(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP)?;
    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    let dir = pod_dir(&status)?;
    let mode = |path: &Path| -> Result<u32> {
        Ok(std::fs::metadata(path)
            .with_context(|| path.display().to_string())?
            .permissions()
            .mode()
            & 0o777)
    };
    ensure!(mode(&dir.join("control.sock"))? == 0o600, "socket mode");
    ensure!(mode(&dir.join("state.json"))? == 0o600, "state.json mode");

    let (code, out) = omnidev(ctx, &repo, &["clean"], SOON)?;
    ensure!(!code.success() && out.contains("already running"), "clean of a running pod:\n{out}");
    ensure!(dir.join("pod.toml").is_file(), "clean removed files anyway");

    send_signal(supervisor_pid(&status)?, "KILL")?;
    ctx.wait_no_pod_process(SOON).context("after kill -9 of omnidev")?;
    ensure!(dir.join("control.sock").exists(), "no stale socket to test");
    let asked = Instant::now();
    let text = status_stopped(ctx, &repo, &[], Duration::from_secs(10))?;
    ensure!(text.contains("not running"), "{text}");
    ctx.note(format!("status on a stale socket {:.2}s", asked.elapsed().as_secs_f64()));

    omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP).context("up after kill -9")?;
    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(status.contains("\"control\": true"), "{status}");
    omnidev_ok(ctx, &repo, &["stop"], SOON)?;

    omnidev_ok(ctx, &repo, &["clean"], SOON)?;
    ensure!(!dir.exists(), "{} still exists", dir.display());
    ensure!(repo.join("pyproject.toml").is_file(), "clean touched the checkout");
    ensure!(ctx.cache_home().join("omnidev").is_dir(), "clean removed the cache root");
    Ok(())
}

/// The agent script of [`agent_script_waits_and_reads_events`].
const AGENT_SCRIPT: &str = r##"
set -u
om() { "$OMNIDEV" "$@" --repo "$REPO"; }
# The exit codes of docs/control.md, by name.
why() { case $1 in 0) echo ok;; 1) echo failed;; 2) echo usage;; 3) echo not-running;; 4) echo timed-out;; *) echo "other-$1";; esac; }
om status >/dev/null; echo "before=$(why $?)"
om wait --ready >/dev/null 2>&1; echo "wait-before=$(why $?)"
om up --detach >/dev/null; echo "up=$(why $?)"
om up --detach > "$AGAIN"; echo "up-again=$(why $?)"
grep -q '^server http://' "$AGAIN"; echo "again-urls=$?"
om wait --ready --timeout 300; echo "ready=$(why $?)"
om status >/dev/null; echo "running=$(why $?)"
om wait >/dev/null 2>&1; echo "usage=$(why $?)"
om wait --ready nosuch >/dev/null 2>&1; echo "unknown=$(why $?)"
om wait --healthy-after-reload --timeout 1 >/dev/null 2>&1; echo "no-reload=$(why $?)"
echo "# touched by the agent script" >> "$REPO/omnigent/log.py"
om wait --healthy-after-reload --timeout 300; echo "healthy=$(why $?)"
om events --since-reload --json > "$EVENTS"; echo "events=$(why $?)"
python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if sum(1 for e in r if e["kind"]=="reload" and "omnigent/log.py" in e["files"])==1 else 1)' "$EVENTS"; echo "found=$?"
python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if r and all(e["v"]==2 and e["ts"].endswith("Z") for e in r) else 1)' "$EVENTS"; echo "shape=$?"
om status --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["last-reload"]["files"]==["omnigent/log.py"] else 1)'; echo "status=$?"
# The server's output since the edit: the old one's last words, one start.
server_since() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; s=[e["line"] for e in r if e["service"]=="server"]; ok=all(e["kind"]=="log" and e["v"]==2 for e in r) and sum("listening on" in l for l in s)==1 and sum("shutdown complete" in l for l in s)==int(sys.argv[2]); sys.exit(0 if ok else 1)' "$LOGS" "$1"; }
om logs --since-reload --json > "$LOGS"; echo "logs=$(why $?)"
server_since 1; echo "logs-since=$?"
# A broken edit: the wait fails at the server's first crash and names it;
# its log since the reload says why; the fix makes it healthy again. It
# comes at once after the log.py reload: the wait judges the reload of the
# latest change the pod has seen, not that earlier one.
cp "$REPO/omnigent/server.py" "$SAVED"
printf '
def broken(:
' >> "$REPO/omnigent/server.py"
om wait --healthy-after-reload --timeout 300 2> "$WHY"; echo "broken=$(why $?)"
grep -q 'server failed' "$WHY"; echo "named=$?"
found=1; for i in 1 2 3 4 5 6 7 8 9 10; do om logs server --since-reload | grep -q SyntaxError && { found=0; break; }; sleep 0.2; done; echo "syntax=$found"
cp "$SAVED" "$REPO/omnigent/server.py"
om wait --healthy-after-reload --timeout 300; echo "fixed=$(why $?)"
om stop; echo "stop=$(why $?)"
om status >/dev/null; echo "after=$(why $?)"
om wait --ready >/dev/null 2>&1; echo "stopped=$(why $?)"
om restart server >/dev/null 2>&1; echo "restart-stopped=$(why $?)"
om logs --since-reload --json > "$LOGS"; echo "logs-stopped=$(why $?)"
server_since 1; echo "logs-since-stopped=$?"
"##;
/// What the agent script prints when every exit code is as documented.
const AGENT_EXPECTED: &[&str] = &[
    "before=not-running",
    "wait-before=not-running",
    "up=ok",
    "up-again=ok",
    "again-urls=0",
    "ready=ok",
    "running=ok",
    "usage=usage",
    "unknown=usage",
    "no-reload=timed-out",
    "healthy=ok",
    "events=ok",
    "found=0",
    "shape=0",
    "status=0",
    "logs=ok",
    "logs-since=0",
    "broken=failed",
    "named=0",
    "syntax=0",
    "fixed=ok",
    "stop=ok",
    "after=not-running",
    "stopped=not-running",
    "restart-stopped=not-running",
    "logs-stopped=ok",
    "logs-since-stopped=0",
];

/// An agent-style shell script (Python's `json` on the output) that
/// branches on the documented exit codes (docs/control.md: 1 a service
/// failed, 2 usage, 3 not running, 4 timed out): `status` and `wait` before
/// `up` (not running), `up --detach` twice (the second reports the running
/// pod), `wait --ready`, a `wait` without a condition and one for an unknown
/// service (usage), a `wait --healthy-after-reload` with no reload coming
/// (timed out), an edit of a `.py` file and `wait --healthy-after-reload`,
/// `events --since-reload --json` names the reload and the changed file,
/// `logs --since-reload --json` has the server's output since then only; a
/// syntax error in the server (the wait fails at the first crash, naming the
/// server; its log since the reload shows the error) and its fix (healthy
/// again); `stop`, then the commands that need a running pod say it does
/// not run, and `logs --since-reload --json` still reads the files.
pub fn agent_script_waits_and_reads_events(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;

    let events_file = ctx.output_file("agent-events");
    let logs_file = ctx.output_file("agent-logs");
    let again_file = ctx.output_file("agent-up-again");
    let why_file = ctx.output_file("agent-why");
    let saved_file = ctx.output_file("agent-server.py");
    let mut command = ctx.command("sh");
    command
        .args(["-c", AGENT_SCRIPT])
        .env("OMNIDEV", ctx.omnidev_path())
        .env("REPO", &repo)
        .env("EVENTS", &events_file)
        .env("LOGS", &logs_file)
        .env("AGAIN", &again_file)
        .env("WHY", &why_file)
        .env("SAVED", &saved_file);
    let output = command.output().context("running the agent script")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    for &line in AGENT_EXPECTED {
        ensure!(
            text.lines().any(|l| l == line),
            "the agent script did not print `{line}`:\n{text}\nstderr:\n{}\nwait's reason:\n{}\nevents:\n{}\nlogs:\n{}",
            String::from_utf8_lossy(&output.stderr),
            read(&why_file),
            read(&events_file),
            read(&logs_file),
        );
    }
    ctx.wait_no_pod_process(Duration::from_secs(2))
        .context("after the agent script's `omnidev stop`")?;
    Ok(())
}
