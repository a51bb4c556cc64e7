//! `cargo xtask bench`: every benchmark named in the issues, each figure
//! printed beside its reference measured in the same run (or its target).
//! A piece that is not available prints `unavailable: <reason>` instead of
//! a number.

mod budgets;
mod databases;
mod db_data;
mod headless;
mod reload;
mod remote;
mod worktree;

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::flags::Bench;
use crate::util;

/// One printed line: a figure and what it is compared with.
struct Row {
    name: &'static str,
    figure: Result<String>,
    reference: String,
}

/// Run the benchmarks and print one row each.
pub fn run(options: &Bench) -> Result<()> {
    let sh = util::shell()?;
    let omnidev = match &options.omnidev {
        Some(path) => fs::canonicalize(path)?,
        None => util::build_omnidev(&sh, "release")?,
    };
    let scratch = std::env::temp_dir().join(format!("omnidev-bench-{}", std::process::id()));
    fs::create_dir_all(&scratch)?;
    let wanted = |name: &str| {
        options.filters.is_empty() || options.filters.iter().any(|f| name.contains(f.as_str()))
    };

    let mut rows = Vec::new();
    if wanted("check") || wanted("hook") {
        rows.push(check_hot_path(&omnidev, &scratch.join("check")));
        rows.push(shell_hook(&omnidev, &scratch.join("hook")));
    }
    if wanted("log") {
        rows.push(log_throughput(&sh));
    }
    if wanted("shutdown") {
        rows.push(shutdown_latency(&sh));
    }
    if wanted("containment") || wanted("stop") {
        rows.extend(containment_stop(&sh, &scratch.join("containment")));
    }
    if wanted("headless") {
        rows.extend(headless::rows(&omnidev, &scratch.join("headless")));
    }
    if wanted("budget") || wanted("rss") {
        rows.extend(budgets::rows(&omnidev, &scratch.join("budgets")));
    } else {
        if wanted("dashboard") {
            rows.push(budgets::dashboard(&omnidev, &scratch.join("budgets")));
            rows.push(budgets::dashboard_idle(&omnidev, &scratch.join("budgets")));
        }
        if wanted("mcp") {
            rows.push(budgets::mcp_flood(&omnidev, &scratch.join("budgets")));
        }
        if wanted("status") {
            rows.push(budgets::status(&omnidev, &scratch.join("budgets")));
        }
    }
    if wanted("up") || wanted("reload") || wanted("tui") {
        rows.extend(pod_benchmarks(&omnidev, &scratch.join("pod"), options.edits));
    }
    if wanted("host") || wanted("remote") {
        rows.extend(remote::rows(&omnidev, &scratch.join("remote")));
    }
    if wanted("database") || wanted("postgres") {
        rows.push(databases::row(&omnidev, &scratch.join("db")));
    }
    if wanted("database") || wanted("clone") || wanted("snapshot") {
        rows.extend(db_data::rows(&omnidev, &scratch.join("db-data")));
    }
    if wanted("worktree") {
        rows.push(worktree::row(
            &omnidev,
            &scratch.join("worktree"),
            options.checkout.as_deref(),
            options.rounds as usize,
        ));
    }
    let rows: Vec<(String, String, String)> = rows
        .into_iter()
        .map(|row| {
            let figure = match row.figure {
                Ok(figure) => figure,
                Err(error) => format!("unavailable: {error:#}"),
            };
            (row.name.to_owned(), figure, row.reference)
        })
        .collect();
    if options.json {
        for (name, figure, reference) in &rows {
            println!(
                "{}",
                serde_json::json!({ "benchmark": name, "figure": figure, "reference": reference })
            );
        }
    } else {
        print!("{}", table(&rows));
    }
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}

/// The rows as an aligned table: each column as wide as its widest cell
/// (the name and figure columns at most [`MAX_COLUMN`]; a longer cell
/// continues on the next line, in its own column).
fn table(rows: &[(String, String, String)]) -> String {
    let header = ("benchmark".to_owned(), "figure".to_owned(), "reference".to_owned());
    let all: Vec<&(String, String, String)> = std::iter::once(&header).chain(rows).collect();
    let width = |cell: fn(&(String, String, String)) -> &String| {
        all.iter().map(|row| cell(row).chars().count()).max().unwrap_or(0).min(MAX_COLUMN)
    };
    let (name_width, figure_width) = (width(|r| &r.0), width(|r| &r.1));
    let mut out = String::from("\n");
    for (name, figure, reference) in all {
        let names = wrap(name, name_width);
        let figures = wrap(figure, figure_width);
        for i in 0..names.len().max(figures.len()) {
            let name = names.get(i).map_or("", String::as_str);
            let figure = figures.get(i).map_or("", String::as_str);
            let reference = if i == 0 { reference.as_str() } else { "" };
            let line = format!("{name:<name_width$}  {figure:<figure_width$}  {reference}");
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// The widest a name or figure column grows; longer cells wrap.
const MAX_COLUMN: usize = 48;

/// `text` in lines of at most `width` characters, broken at spaces where
/// possible.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let needed = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if !line.is_empty() && needed > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        while line.chars().count() > width {
            let cut: String = line.chars().take(width).collect();
            line = line.chars().skip(width).collect();
            lines.push(cut);
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

/// Median wall time of `runs` runs of `command` (output discarded).
fn time_runs(mut command: Command, runs: usize) -> Result<Duration> {
    command.stdout(Stdio::null()).stderr(Stdio::null()).stdin(Stdio::null());
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let status = command.status()?;
        samples.push(start.elapsed());
        if !status.success() {
            bail!("{command:?} failed with {status}");
        }
    }
    Ok(median(samples))
}

/// (a) `omnidev check --quiet` with a fresh cache vs `/bin/true`.
fn check_hot_path(omnidev: &Path, dir: &Path) -> Row {
    const RUNS: usize = 300;
    let mut reference = String::from("(not measured)");
    let figure = (|| -> Result<String> {
        fs::create_dir_all(dir.join("omnidev"))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
        // The fresh-cache recipe from omnidev-install's crate docs.
        fs::write(
            dir.join("omnidev/omnigent-check.json"),
            format!(
                r#"{{"checked_at":{now},"repo":"r","ref":"main","remote_commit":"a","installed_commit":"a"}}"#
            ),
        )?;
        let mut check = Command::new(omnidev);
        check
            .args(["check", "--quiet"])
            .env("XDG_CACHE_HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .env_remove("OMNIDEV_NO_UPDATE_CHECK");
        let output = check.output()?;
        if !output.status.success() || !output.stdout.is_empty() || !output.stderr.is_empty() {
            bail!(
                "`omnidev check --quiet` on a fresh, up-to-date cache did not run silently ({})",
                output.status
            );
        }
        let truth = time_runs(Command::new("/bin/true"), RUNS)?;
        reference = format!("/bin/true {} (median of {RUNS})", millis(truth));
        Ok(format!("{} (median of {RUNS})", millis(time_runs(check, RUNS)?)))
    })();
    Row { name: "omnidev check --quiet, fresh cache", figure, reference }
}

/// The shell hook in an interactive bash with a fresh, quiet cache (the
/// stamp `CheckCache::save` writes): its added start-up time against the
/// same bash without it, and against `omnidev check --quiet` itself. It must
/// start no process: `omnidev` on its PATH is a script that records a call.
fn shell_hook(omnidev: &Path, dir: &Path) -> Row {
    const RUNS: usize = 200;
    let mut reference = String::from("(not measured)");
    let figure = (|| -> Result<String> {
        let cache = dir.join("cache/omnidev");
        let bin = dir.join("bin");
        fs::create_dir_all(&cache)?;
        fs::create_dir_all(&bin)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
        // The stamp's format (omnidev_install::cache::quiet_stamp).
        fs::write(cache.join("omnigent-check.quiet"), format!("{now} 86400\n"))?;
        let called = dir.join("called");
        let fake = bin.join("omnidev");
        fs::write(&fake, format!("#!/bin/sh\necho \"$*\" >> '{}'\n", called.display()))?;
        fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let snippet = Command::new(omnidev).args(["shell-hook", "bash"]).output()?;
        let snippet = String::from_utf8(snippet.stdout)?;
        let bash = |script: &str| {
            let mut command = Command::new("bash");
            command
                .args(["--norc", "--noprofile", "-i", "-c", script])
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("XDG_CACHE_HOME", dir.join("cache"))
                .env_remove("OMNIDEV_NO_UPDATE_CHECK");
            command
        };
        let with = time_runs(bash(&snippet), RUNS)?;
        let without = time_runs(bash(":"), RUNS)?;
        if called.exists() {
            bail!("the hook started omnidev with a fresh, quiet cache");
        }
        let mut check = Command::new(omnidev);
        check
            .args(["check", "--quiet"])
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env("XDG_CONFIG_HOME", dir);
        let check = time_runs(check, RUNS)?;
        let truth = time_runs(Command::new("/bin/true"), RUNS)?;
        reference = format!(
            "bash -i without it {}; omnidev check --quiet {}; /bin/true {} (medians of {RUNS})",
            millis(without),
            millis(check),
            millis(truth)
        );
        Ok(format!(
            "bash -i with it {} (+{}), no process started",
            millis(with),
            millis(with.saturating_sub(without))
        ))
    })();
    Row { name: "shell hook (bash), fresh quiet cache", figure, reference }
}

/// (b) The core's log-throughput example: the supervised log path against
/// the same producer piped to `cat > file`, both measured in one run of it.
fn log_throughput(sh: &xshell::Shell) -> Row {
    let example = util::workspace_root().join("omnidev-core/examples/log_throughput.rs");
    let mut reference = String::from("(not measured)");
    let figure = (|| -> Result<String> {
        if !example.is_file() {
            bail!("{} does not exist yet", example.display());
        }
        let line = core_example_json(sh, "log_throughput")?;
        let line = line.as_str();
        let field = |key: &str| {
            util::json_field(line, key).with_context(|| format!("no `{key}` in {line}"))
        };
        reference =
            format!("producer | cat > file: {} s ({} lines)", field("raw_s")?, field("lines")?);
        Ok(format!("{} s, peak RSS {} MiB", field("supervised_s")?, field("max_rss_mib")?))
    })();
    Row { name: "log throughput (core example)", figure, reference }
}

/// Runs a release build of an `omnidev-core` example and returns the JSON
/// line it reports.
fn core_example_json(sh: &xshell::Shell, example: &str) -> Result<String> {
    let output =
        cmd!(sh, "cargo run --quiet --release -p omnidev-core --example {example}").read()?;
    output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .map(str::to_owned)
        .with_context(|| format!("the example {example} printed no JSON line"))
}

/// The core's shutdown-latency example: `shutdown()` while a service waits
/// out a 30 s backoff (target: under 1 s).
fn shutdown_latency(sh: &xshell::Shell) -> Row {
    let figure = (|| -> Result<String> {
        let line = core_example_json(sh, "shutdown_latency")?;
        let line = line.as_str();
        let field = |key: &str| {
            util::json_field(line, key).with_context(|| format!("no `{key}` in {line}"))
        };
        Ok(format!(
            "{} ms median, {} ms max ({} rounds)",
            field("median_ms")?,
            field("max_ms")?,
            field("rounds")?
        ))
    })();
    Row {
        name: "shutdown during a 30 s backoff",
        figure,
        reference: "target < 1000 ms; the backoff itself is 30 s".to_string(),
    }
}

/// One service starting five helpers the ways servers and agent harnesses
/// do (same group, double fork, `setsid`, double fork + `setsid`,
/// `setpgid(0, 0)`); it and each helper append their pid to `pids`.
const FIVE_WAYS: &str = r#"echo $$ >> pids
sleep 1000 & echo $! >> pids
sh -c 'sleep 1000 & echo $! >> pids' &
setsid sh -c 'echo $$ >> pids; exec sleep 1000' &
sh -c "setsid sh -c 'echo \$\$ >> pids; exec sleep 1000' &" &
python3 -c 'import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "1000"])' & echo $! >> pids
wait
"#;

/// The reference: five helpers that all stay in the service's group.
const FIVE_IN_GROUP: &str = r"echo $$ >> pids
for i in 1 2 3 4 5; do sleep 1000 & echo $! >> pids; done
wait
";

/// (e) SIGINT to "every process gone" for a pod of 3 services × 5 helpers
/// (the core's `supervise` example, release build): with cgroups, with the
/// fallback (subreaper and /proc walk), and, as the reference, the
/// fallback on helpers that all stay in their process group (the
/// process-group-only stop).
fn containment_stop(sh: &xshell::Shell, dir: &Path) -> Vec<Row> {
    const ROUNDS: usize = 5;
    let built = cmd!(sh, "cargo build --quiet --release -p omnidev-core --example supervise").run();
    let supervise = util::target_dir().join("release/examples/supervise");
    let measure = |mode: &str, script: &str| -> Result<String> {
        if let Err(e) = &built {
            bail!("building the supervise example: {e}");
        }
        let mut samples = Vec::with_capacity(ROUNDS);
        for round in 0..ROUNDS {
            let run_dir = dir.join(format!("{mode}-{}-{round}", script.len()));
            fs::create_dir_all(&run_dir)?;
            samples.push(sigint_to_all_gone(&supervise, &run_dir, mode, script)?);
            let _ = fs::remove_dir_all(&run_dir);
        }
        let max = samples.iter().max().copied().unwrap_or_default();
        Ok(format!("{} median, {} max", millis(median(samples)), millis(max)))
    };
    let reference = measure("process-groups", FIVE_IN_GROUP)
        .map_or_else(|e| format!("unavailable: {e:#}"), |f| format!("group-only helpers: {f}"));
    vec![
        Row {
            name: "SIGINT to all gone, 3x5 helpers, cgroup",
            figure: measure("auto", FIVE_WAYS),
            reference: reference.clone(),
        },
        Row {
            name: "SIGINT to all gone, 3x5 helpers, fallback",
            figure: measure("process-groups", FIVE_WAYS),
            reference,
        },
    ]
}

/// One round: start the pod, wait for its 18 processes, SIGINT the
/// supervisor, time until it and every recorded process are gone.
fn sigint_to_all_gone(supervise: &Path, dir: &Path, mode: &str, script: &str) -> Result<Duration> {
    fs::write(dir.join("helpers.sh"), script)?;
    let mut pod = Guard(
        Command::new(supervise)
            .current_dir(dir)
            .env("OMNIDEV_CONTAINMENT", mode)
            .args(["--grace-ms", "5000", "--"])
            .args(["a=sh helpers.sh", "b=sh helpers.sh", "c=sh helpers.sh"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let pids: Vec<u32> = poll(Duration::from_secs(30), || {
        let pids: Vec<u32> = fs::read_to_string(dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        (pids.len() == 18
            && pids
                .iter()
                .all(|&p| omnidev_core::platform::stat(p).is_some_and(|s| !s.is_zombie())))
        .then_some(pids)
    })?;
    let start = Instant::now();
    let sent = Command::new("kill").arg("-INT").arg(pod.0.id().to_string()).status()?;
    if !sent.success() {
        bail!("kill -INT {} failed", pod.0.id());
    }
    poll(Duration::from_secs(30), || {
        let gone =
            pids.iter().all(|&p| omnidev_core::platform::stat(p).is_none_or(|s| s.is_zombie()));
        (gone && pod.0.try_wait().ok().flatten().is_some()).then_some(())
    })?;
    Ok(start.elapsed())
}

const STUB_SERVER: &str = r#"
import http.server, os, sys
# The application's code: a syntax error in it crashes the server at
# start, as it does a Python web server.
if len(sys.argv) > 2:
    with open(sys.argv[2]) as source:
        exec(compile(source.read(), sys.argv[2], "exec"), {})
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
print("stub-server ready", os.getpid(), flush=True)
server.serve_forever()
"#;

const STUB_PROFILE: &str = r#"
[repo]
markers = ["src"]

[pod]
dirs = ["logs"]

[ports]
server = 7700

[watch]
debounce-ms = 100

[services.server]
command = [PYTHON, "{repo}/stub_server.py", "{port.server}", "{repo}/src/app.py"]
ready = { http = "http://127.0.0.1:{port.server}/health", interval-ms = 20, timeout-ms = 30000 }
watch = ["src/**/*.py"]

[services.host]
command = ["sh", "-c", "echo stub-host started; exec sleep 100000"]
depends-on = { server = "ready" }

[services.idle]
command = ["sleep", "100000"]
"#;

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The interpreter `python3` on PATH runs, found once: a version manager's
/// shim (pyenv's is two bash scripts and some 20 forks) would put its own
/// 100 ms or so, and its noise, into every boot the benchmarks time.
fn python() -> &'static Path {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .filter(|exe| Path::new(exe).is_absolute())
            .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
    })
}

/// A checkout with the stub profile: a ready-at-once server, a host that
/// waits for it, an idle third service.
fn stub_checkout(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir.join("src"))?;
    fs::create_dir_all(dir.join(".git"))?;
    fs::write(dir.join("stub_server.py"), STUB_SERVER)?;
    // A JSON string is a TOML basic string too.
    let python = serde_json::Value::from(python().to_string_lossy()).to_string();
    fs::write(dir.join("omnidev.toml"), STUB_PROFILE.replace("PYTHON", &python))?;
    fs::write(dir.join("src/app.py"), "VALUE = 0\n")?;
    Ok(())
}

fn health_pid(port: u16) -> Option<String> {
    match util::http_get(port, "/health") {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

fn poll<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if start.elapsed() > timeout {
            bail!("timed out");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGTERM to a child on drop (omnidev tears its pod down on it), SIGKILL
/// if it is still there 10 s later.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // Already ended and reaped: its pid may be someone else's now.
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stub server of `repo` on `port`, on its own (output discarded).
fn stub_server(repo: &Path, port: u16) -> Result<Guard> {
    Ok(Guard(
        Command::new(python())
            .arg(repo.join("stub_server.py"))
            .arg(port.to_string())
            .arg(repo.join("src/app.py"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    ))
}

/// The services' own start time: stub server until `/health`, then the host
/// until its line.
fn own_start_time(repo: &Path) -> Result<Duration> {
    let port = free_port()?;
    let start = Instant::now();
    let _server = stub_server(repo, port)?;
    poll(Duration::from_secs(30), || health_pid(port))?;
    let host = Command::new("sh").args(["-c", "echo stub-host started"]).output()?;
    if !host.status.success() {
        bail!("stub host failed");
    }
    Ok(start.elapsed())
}

/// (c) Start-up overhead, reload latency, idle TUI CPU of `omnidev up`.
#[allow(clippy::too_many_lines, reason = "three measurements sharing one stub checkout")]
fn pod_benchmarks(omnidev: &Path, dir: &Path, edits: u32) -> Vec<Row> {
    let repo = dir.join("stub");
    let home = dir.join("home");
    let prepared = stub_checkout(&repo).and_then(|()| Ok(fs::create_dir_all(&home)?));
    // `omnidev up --headless` of the stub checkout on server port `port`.
    let up = |port: u16| {
        let mut command = Command::new(omnidev);
        command
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .stdin(Stdio::null())
            .args(["up", "--headless", "--repo"])
            .arg(&repo)
            .arg("--port")
            .arg(format!("server={port}"));
        command
    };
    let mut rows = Vec::new();
    let mut own = String::from("(not measured)");
    let startup = (|| -> Result<(String, u16)> {
        prepared.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let mut overheads = Vec::new();
        let mut owns = Vec::new();
        let mut last_port = 0;
        for round in 0..5 {
            let port = free_port()?;
            let out = dir.join(format!("startup-{round}.log"));
            let mut command = up(port);
            command.stdout(fs::File::create(&out)?).stderr(Stdio::null());
            let launched = Instant::now();
            let mut pod = Guard(command.spawn()?);
            poll(Duration::from_mins(1), || {
                if let Ok(Some(status)) = pod.0.try_wait() {
                    return Some(Err(anyhow::anyhow!("omnidev exited with {status}")));
                }
                fs::read_to_string(&out).ok()?.contains("stub-host started").then_some(Ok(()))
            })??;
            let all = launched.elapsed();
            drop(pod);
            let own = own_start_time(&repo)?;
            owns.push(own);
            overheads.push(all.saturating_sub(own));
            last_port = port;
        }
        own = format!("target <= 200 ms; services' own start {}", millis(median(owns)));
        Ok((millis(median(overheads)), last_port))
    })();
    let startup_ok = startup.is_ok();
    rows.push(Row {
        name: "up: start-up overhead (median of 5)",
        figure: startup.map(|(figure, _)| figure),
        reference: own,
    });

    if startup_ok {
        let with_output = |port: u16, output: &Path| -> Command {
            let mut command = up(port);
            match fs::File::create(output) {
                Ok(file) => command.stdout(file),
                Err(_) => command.stdout(Stdio::null()),
            };
            command.stderr(Stdio::null());
            command
        };
        rows.extend(reload::rows(&repo, dir, &with_output, edits));
    }

    let idle = (|| -> Result<String> {
        if !startup_ok {
            bail!("omnidev up does not run the stub profile");
        }
        idle_tui_cpu(omnidev, &repo, &home)
    })();
    rows.push(Row {
        name: "up: idle TUI CPU over 10 s (tmux)",
        figure: idle,
        reference: "target < 1% of one core".into(),
    });
    rows
}

/// CPU time of `pid` (user + system).
fn cpu_time(pid: u32) -> Result<Duration> {
    omnidev_core::platform::cpu_time(pid)
        .with_context(|| format!("cannot read the CPU time of pid {pid}"))
}

/// A private tmux server (its own socket); killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(name: &str) -> Self {
        Self { socket: format!("omnidev-bench-{}-{name}", std::process::id()) }
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let output = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()?;
        if !output.status.success() {
            bail!("tmux {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn idle_tui_cpu(omnidev: &Path, repo: &Path, home: &Path) -> Result<String> {
    let port = free_port()?;
    let session = Tmux::new("idle");
    let tmux = |args: &[&str]| session.run(args);
    let launch = format!(
        "XDG_CACHE_HOME='{}' XDG_CONFIG_HOME='{}' exec '{}' up --repo '{}' --port server={port}",
        home.join(".cache").display(),
        home.join(".config").display(),
        omnidev.display(),
        repo.display()
    );
    tmux(&["new-session", "-d", "-s", "bench", "-x", "200", "-y", "50", &launch])?;
    let result = (|| -> Result<String> {
        let pid: u32 = tmux(&["display-message", "-p", "-t", "bench", "#{pane_pid}"])?.parse()?;
        poll(Duration::from_mins(1), || health_pid(port))?;
        // Let start-up work finish before the idle window opens.
        std::thread::sleep(Duration::from_secs(2));
        let before = cpu_time(pid)?;
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs(10));
        let used = cpu_time(pid)?.saturating_sub(before);
        Ok(format!(
            "{:.2}% of one core",
            100.0 * used.as_secs_f64() / start.elapsed().as_secs_f64()
        ))
    })();
    let _ = tmux(&["send-keys", "-t", "bench", "q"]);
    let _ = poll(Duration::from_secs(15), || {
        tmux(&["has-session", "-t", "bench"]).is_err().then_some(())
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_keeps_its_columns_whatever_the_cell_lengths() {
        let rows = vec![
            ("short".to_owned(), "1 ms".to_owned(), "ref".to_owned()),
            (
                "reload: edit to new server answering, a long name indeed here".to_owned(),
                "median 262 ms, p90 491 ms, max 503 ms (10 edits, 3 warm-ups)".to_owned(),
                "watchexec -r 260 ms".to_owned(),
            ),
        ];
        let text = table(&rows);
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        // Every figure starts in the same column as the header's.
        let figure_column = lines[0].find("figure").expect("header");
        assert_eq!(lines[1].find("1 ms"), Some(figure_column), "{text}");
        assert_eq!(lines[2].find("median"), Some(figure_column), "{text}");
        // A long name wraps within its column instead of pushing the rest.
        assert!(lines.len() > 3, "{text}");
        assert!(lines.iter().all(|l| l.chars().count() < 130), "{text}");
        for line in &lines[3..] {
            assert!(
                line.chars().take(figure_column).collect::<String>().trim().len() <= MAX_COLUMN,
                "{text}"
            );
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_long_words() {
        assert_eq!(wrap("ab cd ef", 5), ["ab cd", "ef"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("", 3), [""]);
    }
}
