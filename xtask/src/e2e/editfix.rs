//! Cases: the edit–fix loop as a developer lives it — a syntax error puts
//! the server into a long backoff and the fix brings it back at once, once;
//! `--no-vite` advertises no UI; the services' last words after Ctrl-C; and
//! `omnidev omnigent` in a checkout whose pod never ran.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::{Ctx, SOON, UP, parse};
use crate::util;

/// The watcher's debounce in the embedded profile.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// What omnidev may add to debounce + the server's own boot.
const SLACK: Duration = Duration::from_millis(300);

/// `omnidev | server started (pid …)` lines from `from` (a line index) on.
fn starts_after(out: &str, service: &str, from: usize) -> usize {
    let needle = format!("omnidev | {service} started (pid ");
    out.lines().skip(from).filter(|line| line.contains(&needle)).count()
}

/// The time the example server takes from `uv run` to answering
/// `/health`, run by hand in `repo` (its venv exists): the server's own
/// boot, which no supervisor can shorten.
fn bare_boot(ctx: &Ctx, repo: &Path) -> Result<Duration> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let data = ctx.dir.join("bare");
    fs::create_dir_all(&data)?;
    let started = Instant::now();
    let mut server = ctx
        .command("uv")
        .args(["run", "--python", "3.12", "omnigent", "server", "--port"])
        .arg(port.to_string())
        .arg("--database-uri")
        .arg(format!("sqlite:///{}/chat.db", data.display()))
        .arg("--artifact-location")
        .arg(&data)
        .current_dir(repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // uv runs Python as its child: the group is killed, not uv alone.
        .process_group(0)
        .spawn()?;
    let answered = util::wait_for("the bare server to answer /health", SOON, || {
        Ok(matches!(util::http_get(port, "/health"), Ok((200, _))).then(|| started.elapsed()))
    });
    let _ = ctx.command("kill").args(["-KILL", "--", &format!("-{}", server.id())]).status();
    let _ = server.wait();
    answered
}

/// A syntax error crashes the server into a 16 s backoff; fixing the file
/// brings it back healthy within debounce + the server's own boot + 300 ms,
/// with exactly one server start and one host start after the fix.
pub fn syntax_error_backoff_then_fix_restarts_once(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &["--no-vite"])?;
    let server = pod.ready_backend(UP)?;
    let boot_before = bare_boot(ctx, &repo)?;

    let source = repo.join("omnigent/server.py");
    let good = fs::read_to_string(&source)?;
    fs::write(&source, format!("{good}\ndef broken(:\n"))?;
    pod.wait_output("restart #5 in 16s", Duration::from_mins(2), |out| {
        out.contains("server crashed (exit code 1); restart #5 in 16s").then_some(())
    })?;
    let fix_line = pod.output().lines().count();
    let fixed = Instant::now();
    fs::write(&source, &good)?;
    let back = pod.server(Some(server.pid), SOON)?;
    let took = fixed.elapsed();
    // It may answer before its own line has made it through omnidev.
    let listening = pod.wait_output("the fixed server's listening line", SOON, |out| {
        parse::listening_line(out, back.pid)
    })?;
    pod.wait_output("the host to connect to the fixed server", SOON, |out| {
        out.lines()
            .skip(listening)
            .any(|line| line.contains("omnigent-host: Connected as"))
            .then_some(())
    })?;
    // The reload of the latest change the watcher saw is healthy (a
    // reload queued behind the fix would be that one: `wait` follows a
    // change seen meanwhile), so the starts below are all there are; that
    // the cancelled backoff fires no restart later is the paused-clock
    // test `a_fix_during_a_long_backoff_restarts_at_once_and_only_once`.
    ctx.wait_healthy_after_reload(&repo)?;
    let boot = boot_before.max(bare_boot(ctx, &repo)?);
    let out = pod.output();
    let servers = starts_after(&out, "server", fix_line);
    let hosts = starts_after(&out, "host", fix_line);
    ensure!(
        servers == 1 && hosts == 1,
        "after the fix the server started {servers} times and the host {hosts} times \
         (want 1 and 1):\n{}",
        out.lines().skip(fix_line).collect::<Vec<_>>().join("\n")
    );
    ensure!(
        out.lines()
            .skip(fix_line)
            .any(|line| line.contains("omnidev | reloading server: omnigent/server.py")),
        "the reload does not name the fixed file:\n{out}"
    );
    ensure!(
        took <= DEBOUNCE + boot + SLACK,
        "fix -> healthy took {:.2}s; debounce + boot ({:.2}s) + 300 ms allows {:.2}s",
        took.as_secs_f64(),
        boot.as_secs_f64(),
        (DEBOUNCE + boot + SLACK).as_secs_f64()
    );
    ctx.note(format!(
        "fix -> healthy {:.2}s (server's own boot {:.2}s), 1 server + 1 host start",
        took.as_secs_f64(),
        boot.as_secs_f64()
    ));
    pod.stop_with("INT", ctx)?;
    Ok(())
}

/// With `--no-vite` no `ui` URL appears in headless output, `up --detach`
/// or `status --json`; after SIGINT headless output goes on to the
/// server's last shutdown line, then says how each service ended.
pub fn no_vite_no_ui_url_and_shutdown_lines_after_sigint(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &["--no-vite"])?;
    let server = pod.ready_backend(UP)?;
    let url = format!("server http://localhost:{}", server.port);
    pod.wait_output("the server's URL", SOON, |out| out.contains(&url).then_some(()))?;
    pod.stop_with("INT", ctx)?;
    let out = pod.output();
    ensure!(!out.contains("ui http"), "a ui URL with --no-vite:\n{out}");
    let interrupted = out
        .lines()
        .position(|line| line.contains("omnidev | stopping the pod (SIGINT)"))
        .context("no interrupt line")?;
    let last_word = format!("omnigent-server: shutdown complete pid={}", server.pid);
    let said = out
        .lines()
        .position(|line| line.starts_with("server") && line.contains(&last_word))
        .with_context(|| format!("no `{last_word}` line in the output:\n{out}"))?;
    ensure!(said > interrupted, "the last word came before the interrupt");
    for ending in ["omnidev | ended: server stopped (", "omnidev | ended: host stopped ("] {
        ensure!(out.contains(ending), "no `{ending}` line:\n{out}");
    }

    let repo_arg = repo.display().to_string();
    let (status, detached) =
        ctx.run_omnidev(&["up", "--detach", "--no-vite", "--repo", &repo_arg], UP)?;
    let result = (|| -> Result<()> {
        ensure!(status.success(), "up --detach --no-vite: {status}\n{detached}");
        ensure!(
            detached.contains("server http://localhost:") && !detached.contains("ui http"),
            "up --detach --no-vite printed:\n{detached}"
        );
        let (_, json) = ctx.run_omnidev(&["status", "--json", "--repo", &repo_arg], SOON)?;
        ensure!(
            json.contains("\"name\": \"server\"") && !json.contains("\"name\": \"ui\""),
            "status --json:\n{json}"
        );
        Ok(())
    })();
    let (stopped, out) = ctx.run_omnidev(&["stop", "--repo", &repo_arg], SOON)?;
    ensure!(stopped.success(), "stop: {out}");
    result
}

/// `omnidev omnigent -- --version` in a checkout whose pod never ran works
/// and writes `pod.toml`; a second call leaves it byte-identical.
pub fn omnigent_in_a_never_started_checkout(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let run = |ctx: &Ctx| -> Result<String> {
        let output =
            ctx.omnidev().args(["omnigent", "--", "--version"]).current_dir(&repo).output()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        ensure!(output.status.success(), "omnidev omnigent -- --version: {text}");
        ensure!(text.contains("omnigent 0.1.0 (example)"), "{text}");
        Ok(text)
    };
    run(ctx)?;
    let pod_toml = fs::read_dir(ctx.cache_home().join("omnidev"))?
        .flatten()
        .map(|entry| entry.path().join("pod.toml"))
        .find(|path| path.is_file())
        .context("omnidev omnigent wrote no pod.toml")?;
    let first = fs::read(&pod_toml)?;
    ensure!(String::from_utf8_lossy(&first).contains("server = "), "pod.toml holds no server port");
    run(ctx)?;
    ensure!(fs::read(&pod_toml)? == first, "a second call changed {}", pod_toml.display());
    Ok(())
}
