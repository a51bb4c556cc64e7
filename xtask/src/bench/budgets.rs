//! Memory budgets through the `omnidev` binary, each figure against the
//! budget the docs state and the finding of issue #25 it fixes:
//!
//! - the TUI (in tmux) while a service prints a 5 MB line every 0.5 s for
//!   30 s (the finding's own rate and length);
//! - `omnidev up --headless` with 32 `events -f --logs` followers that
//!   never read, while a service prints lines of control bytes (JSON
//!   escapes each six-fold), and after they left;
//! - `omnidev up --headless` of a checkout whose `.gitignore` has 30,000
//!   rules, watched by three rules, through a reload;
//! - `omnidev profile check` of 5,000 services under 10,000 `[env]`
//!   entries (a 0.7 MB profile; issue #57), under a memory cap;
//! - `omnidev logs -n 10` and the MCP `logs` tool on a 2 GiB service log
//!   (made here, in the scratch directory), and `omnidev mcp` asked for
//!   logs and events while a service floods 200 KB lines (issue #53);
//! - `omnidev dashboard` over 10 pods, one flooding, each read by a page,
//!   then its CPU with nothing changing (issue #62).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Guard, Row, Tmux, cpu_time, poll};

const MIB: u64 = 1024 * 1024;

#[path = "../../../omnidev-cli/tests/support/budgets.rs"]
mod shared;

use shared::{many_rules, many_services_profile, printer_profile, watched_profile};

/// `VmRSS` (or with `peak`, `VmHWM`) of `pid` in bytes; 0 once it is gone.
fn rss(pid: u32, peak: bool) -> u64 {
    let kib = if peak {
        omnidev_core::platform::peak_rss_kib(pid)
    } else {
        omnidev_core::platform::rss_kib(pid)
    };
    kib.map_or(0, |kib| kib * 1024)
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes / MIB)
}

/// A checkout in `dir` whose one service writes `line` (a Python
/// expression) `times` at a time every `pause` seconds, counting the lines
/// in `count`.
fn printer(dir: &Path, line: &str, times: u32, pause: f64) -> Result<PathBuf> {
    let repo = dir.join("repo");
    fs::create_dir_all(repo.join(".git"))?;
    fs::write(repo.join("omnidev.toml"), printer_profile(line, times, pause))?;
    Ok(repo)
}

fn printed(repo: &Path) -> u64 {
    fs::read_to_string(repo.join("count")).ok().and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// `command` with omnidev's state (cache, config, runtime dirs) under
/// `dir`, and no input.
fn in_state<'c>(command: &'c mut Command, dir: &Path) -> &'c mut Command {
    command
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_RUNTIME_DIR", dir.join("run"))
        .stdin(Stdio::null())
}

/// `omnidev` with its state under `dir` ([`in_state`]).
fn omnidev_in(omnidev: &Path, dir: &Path) -> Command {
    let mut command = Command::new(omnidev);
    in_state(&mut command, dir);
    command
}

/// `omnidev ARGS` with its state under `dir`, run by GNU time (under
/// `prlimit --as=CAP` with a `cap`); its output and peak RSS in bytes.
fn timed(
    omnidev: &Path,
    dir: &Path,
    cap: Option<u64>,
    args: &[&std::ffi::OsStr],
) -> Result<(std::process::Output, u64)> {
    let mut command = Command::new(if cap.is_some() { "prlimit" } else { "/usr/bin/time" });
    if let Some(cap) = cap {
        command.arg(format!("--as={cap}")).arg("/usr/bin/time");
    }
    command.args(["-f", "%M"]).arg(omnidev).args(args);
    let output = in_state(&mut command, dir)
        .output()
        .context("running GNU time (/usr/bin/time) and prlimit (util-linux)")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let kib: u64 = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("GNU time printed no peak RSS: {stderr}"))?;
    Ok((output, kib * 1024))
}

/// `omnidev up --headless` of `repo` with its state under `dir`, its
/// output in `out`.
fn headless(omnidev: &Path, dir: &Path, repo: &Path, out: &Path) -> Result<Guard> {
    Ok(Guard(
        omnidev_in(omnidev, dir)
            .args(["up", "--headless", "--repo"])
            .arg(repo)
            .env("NO_COLOR", "1")
            .stdout(fs::File::create(out)?)
            .stderr(Stdio::null())
            .spawn()?,
    ))
}

/// The control socket of the only pod under `dir`, once it answers.
fn control_socket(dir: &Path) -> Result<PathBuf> {
    poll(Duration::from_mins(1), || {
        fs::read_dir(dir.join("cache/omnidev"))
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("control.sock"))
            .find(|socket| UnixStream::connect(socket).is_ok())
    })
}

/// One row: `measure` run in the scratch directory `scratch` under `dir`
/// (removed after), its figure against `budget`.
fn one(
    omnidev: &Path,
    dir: &Path,
    name: &'static str,
    scratch: &str,
    measure: fn(&Path, &Path) -> Result<(String, String)>,
    budget: &str,
) -> Row {
    let scratch = dir.join(scratch);
    let result = fs::create_dir_all(&scratch)
        .map_err(anyhow::Error::from)
        .and_then(|()| measure(omnidev, &scratch));
    let _ = fs::remove_dir_all(&scratch);
    let (figure, reference) = match result {
        Ok((figure, reference)) => (Ok(figure), format!("{budget}; {reference}")),
        Err(e) => (Err(e), budget.to_owned()),
    };
    Row { name, figure, reference }
}

/// The memory rows.
pub(super) fn rows(omnidev: &Path, dir: &Path) -> Vec<Row> {
    vec![
        one(
            omnidev,
            dir,
            "TUI RSS, a 5 MB line every 0.5 s for 30 s (tmux)",
            "tui",
            tui_rss,
            "budget < 200 MiB (the panes show the history: 4 MiB of lines, 512 KiB a service)",
        ),
        one(
            omnidev,
            dir,
            "omnidev RSS, 32 stalled events -f --logs followers",
            "followers",
            followers_rss,
            "budget: before + 32 x 2.5 MiB while they stall, before + 24 MiB after",
        ),
        one(
            omnidev,
            dir,
            "peak RSS of `logs -n 10` and MCP `logs` on a 2 GiB log",
            "big-log",
            big_log_rss,
            "goal <= 50 MiB each (one bounded reader, from the end)",
        ),
        mcp_flood(omnidev, dir),
        one(
            omnidev,
            dir,
            "`profile check` of 5,000 services x 10,000 [env] entries",
            "many-services",
            many_services,
            "goal <= 200 MiB peak and <= 2 s (release), under a 4 GiB address-space cap",
        ),
        dashboard(omnidev, dir),
        dashboard_idle(omnidev, dir),
        status(omnidev, dir),
        one(
            omnidev,
            dir,
            "omnidev RSS, .gitignore of 30,000 rules, 3 watch rules",
            "gitignore",
            gitignore_rss,
            "budget < 200 MiB peak (one compiled set per checkout)",
        ),
    ]
}

/// The MCP server's row (also alone: `cargo xtask bench mcp`).
pub(super) fn mcp_flood(omnidev: &Path, dir: &Path) -> Row {
    one(
        omnidev,
        dir,
        "peak RSS of `omnidev mcp` under a log flood",
        "mcp-flood",
        mcp_flood_rss,
        "goal <= 64 MiB",
    )
}

/// The cost of `status` measuring every service (also alone: `cargo
/// xtask bench status`).
pub(super) fn status(omnidev: &Path, dir: &Path) -> Row {
    one(
        omnidev,
        dir,
        "`status --json` of a pod of 50 services, each one's memory and CPU read",
        "status-50",
        status_of_50,
        "issue #82: a bounded cost, nothing sampled while nobody looks",
    )
}

/// The dashboard's row (also alone: `cargo xtask bench dashboard`).
pub(super) fn dashboard(omnidev: &Path, dir: &Path) -> Row {
    one(
        omnidev,
        dir,
        "omnidev dashboard: 10 pods, one flooding, a page reading each",
        "dashboard",
        dashboard_rss,
        "goal: a fixed cost a page (1 MiB a stream); idle CPU 0% with nothing changing",
    )
}

fn tui_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    const SECONDS: u64 = 30;
    let repo = printer(dir, "'x' * 5000000", 1, 0.5)?;
    let tmux = Tmux::new("budgets");
    let launch = format!(
        "XDG_CACHE_HOME='{0}/cache' XDG_CONFIG_HOME='{0}/config' XDG_RUNTIME_DIR='{0}/run' \
         exec '{1}' up --repo '{2}'",
        dir.display(),
        omnidev.display(),
        repo.display()
    );
    tmux.run(&["new-session", "-d", "-s", "bench", "-x", "120", "-y", "40", &launch])?;
    let pid: u32 = tmux.run(&["display-message", "-p", "-t", "bench", "#{pane_pid}"])?.parse()?;
    poll(Duration::from_mins(1), || (printed(&repo) >= 1).then_some(()))?;
    let start = Instant::now();
    let first = printed(&repo);
    let mut peak = 0;
    while start.elapsed() < Duration::from_secs(SECONDS) {
        let now = rss(pid, false);
        if now == 0 {
            bail!("the TUI ended");
        }
        peak = peak.max(now);
        std::thread::sleep(Duration::from_millis(100));
    }
    let lines = printed(&repo) - first;
    let end = rss(pid, false);
    peak = peak.max(rss(pid, true));
    let _ = tmux.run(&["send-keys", "-t", "bench", "q"]);
    let _ = poll(Duration::from_secs(15), || {
        tmux.run(&["has-session", "-t", "bench"]).is_err().then_some(())
    });
    if peak >= 200 * MIB {
        bail!("peak {} over the budget", mib(peak));
    }
    Ok((
        format!(
            "peak {}, {} at the end ({lines} lines of 5 MB in {SECONDS} s)",
            mib(peak),
            mib(end)
        ),
        "was 1.1-1.26 GiB".to_owned(),
    ))
}

fn followers_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    const FOLLOWERS: u64 = 32;
    let repo = printer(dir, "'\\u0001' * 60000", 10, 0.1)?;
    let pod = headless(omnidev, dir, &repo, &dir.join("out.txt"))?;
    let pid = pod.0.id();
    let socket = control_socket(dir)?;
    // The pod keeps 4 MiB of lines: 70 of them fill it.
    poll(Duration::from_mins(1), || (printed(&repo) >= 200).then_some(()))?;
    let before = rss(pid, false);
    let followers = (0..FOLLOWERS)
        .map(|_| -> Result<UnixStream> {
            let mut stream = UnixStream::connect(&socket)?;
            stream.write_all(b"{\"cmd\":\"events\",\"follow\":true,\"logs\":true}\n")?;
            Ok(stream)
        })
        .collect::<Result<Vec<_>>>()?;
    // They take nothing for 8 s (the pod drops a reader after 10 s).
    let start = Instant::now();
    let from = printed(&repo);
    let mut peak = 0;
    while start.elapsed() < Duration::from_secs(8) {
        peak = peak.max(rss(pid, false));
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = printed(&repo) - from;
    drop(followers);
    std::thread::sleep(Duration::from_secs(3));
    let after = rss(pid, false);
    drop(pod);
    let budget = before + FOLLOWERS * (5 * MIB / 2);
    if peak >= budget || after > before + 24 * MIB {
        bail!("peak {}, {} after (before {}): over the budget", mib(peak), mib(after), mib(before));
    }
    Ok((
        format!(
            "{} before, peak {} while {lines} lines of 60 KB control bytes went by, {} 3 s \
             after they left",
            mib(before),
            mib(peak),
            mib(after)
        ),
        "was 17 MiB -> about 850 MiB, 140 MiB after".to_owned(),
    ))
}

fn gitignore_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    let repo = dir.join("repo");
    fs::create_dir_all(repo.join(".git"))?;
    fs::write(repo.join(".gitignore"), many_rules(30_000))?;
    for name in ["a", "b", "c"] {
        fs::create_dir_all(repo.join(name))?;
        fs::write(repo.join(name).join("app.py"), "x = 1\n")?;
    }
    fs::write(repo.join("omnidev.toml"), watched_profile(&["a", "b", "c"]))?;
    let out = dir.join("out.txt");
    let pod = headless(omnidev, dir, &repo, &out)?;
    let said = |what: &str, times: usize| {
        poll(Duration::from_mins(2), || {
            (fs::read_to_string(&out).ok()?.matches(what).count() >= times).then_some(())
        })
        .with_context(|| format!("no {what:?} in the output"))
    };
    said("reloads on changes", 3)?;
    fs::write(repo.join("a/app.py"), "x = 2\n")?;
    said("reloading a", 1)?;
    let peak = rss(pod.0.id(), true);
    let now = rss(pod.0.id(), false);
    drop(pod);
    if peak >= 200 * MIB {
        bail!("peak {} over the budget", mib(peak));
    }
    Ok((
        format!("peak {}, {} after a reload", mib(peak), mib(now)),
        "was about 19 KB a rule (30,000 rules 580 MB)".to_owned(),
    ))
}

/// `omnidev mcp` of the pod of `repo` (its state under `dir`), with the
/// handshake done: its stdin, its stdout's lines, its pid.
struct Mcp {
    child: Guard,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    next_id: u64,
}

impl Mcp {
    fn start(omnidev: &Path, dir: &Path, repo: &Path) -> Result<Self> {
        let mut child = omnidev_in(omnidev, dir)
            .args(["mcp", "--repo"])
            .arg(repo)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take().context("mcp stdin")?;
        let stdout = child.stdout.take().context("mcp stdout")?;
        let mut mcp = Self {
            child: Guard(child),
            stdin,
            lines: std::io::BufRead::lines(std::io::BufReader::new(stdout)),
            next_id: 1,
        };
        mcp.ask(
            "initialize",
            &serde_json::json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}
            }),
        )?;
        writeln!(
            mcp.stdin,
            "{}",
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )?;
        Ok(mcp)
    }

    /// Sends a request and reads to its answer; the answer's length.
    fn ask(&mut self, method: &str, params: &serde_json::Value) -> Result<usize> {
        let id = self.next_id;
        self.next_id += 1;
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{request}")?;
        for line in self.lines.by_ref() {
            let line = line?;
            let answer: serde_json::Value = serde_json::from_str(&line)?;
            if answer["id"] == id {
                if answer.get("error").is_some() || answer["result"]["isError"] == true {
                    bail!("{method} failed: {line}");
                }
                return Ok(line.len());
            }
        }
        bail!("omnidev mcp ended before answering {method}")
    }

    fn tool(&mut self, name: &str, arguments: &serde_json::Value) -> Result<usize> {
        self.ask("tools/call", &serde_json::json!({"name": name, "arguments": arguments}))
    }

    fn peak(&self) -> u64 {
        rss(self.child.0.id(), true)
    }
}

/// A pod of one quiet service `svc`, started and stopped so that its
/// directory (and `logs/svc.log`) stays; `svc.log` then grows to 2 GiB of
/// 1000-byte lines; `logs -n 10` (under GNU time) and the MCP `logs` tool
/// read its end.
fn big_log_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    const SIZE: u64 = 2 << 30;
    let repo = dir.join("repo");
    fs::create_dir_all(repo.join(".git"))?;
    fs::write(
        repo.join("omnidev.toml"),
        "[services.svc]\ncommand = [\"sh\", \"-c\", \"echo up; exec sleep 300\"]\n",
    )?;
    let pod = headless(omnidev, dir, &repo, &dir.join("out.txt"))?;
    let socket = control_socket(dir)?;
    drop(pod);
    let log = socket.parent().context("the pod directory")?.join("logs/svc.log");
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, fs::File::create(&log)?);
        let line = format!("{}\n", "x".repeat(999));
        let mut written = 0;
        let mut n = 0u64;
        while written < SIZE {
            write!(out, "{n:012} {}", &line[13..])?;
            written += line.len() as u64;
            n += 1;
        }
        out.flush()?;
    }
    let args = ["logs", "svc", "-n", "10", "--repo"].map(std::ffi::OsStr::new);
    let (timed, cli_peak) = timed(omnidev, dir, None, &[&args[..], &[repo.as_os_str()]].concat())?;
    let shown = String::from_utf8_lossy(&timed.stdout).lines().count();
    if !timed.status.success() || shown != 10 {
        bail!("`omnidev logs svc -n 10` printed {shown} lines ({})", timed.status);
    }
    let mut mcp = Mcp::start(omnidev, dir, &repo)?;
    let answer = mcp.tool("logs", &serde_json::json!({"service": "svc", "lines": 10}))?;
    let mcp_peak = mcp.peak();
    drop(mcp);
    let figure = format!(
        "logs -n 10: {}, MCP logs: {} (answer {} bytes)",
        mib(cli_peak),
        mib(mcp_peak),
        answer
    );
    if cli_peak > 50 * MIB || mcp_peak > 50 * MIB {
        bail!("{figure}: over 50 MiB");
    }
    Ok((figure, "was 7,260 and 7,263 MiB".to_owned()))
}

/// A pod whose service `printer` prints ten 200 KB lines every 50 ms and
/// whose `spinner` writes 5,000-character unfinished lines ending in `\r`
/// (a progress bar); `omnidev mcp` asked for each one's logs and for the
/// pod's events (with lines), every tool at its maxima, for 30 s.
fn mcp_flood_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    let repo = printer(dir, "'x' * 200000", 10, 0.05)?;
    let mut profile = fs::read_to_string(repo.join("omnidev.toml"))?;
    profile.push_str(concat!(
        "\n[services.spinner]\n",
        r#"command = ["python3", "-u", "-c", "import sys, time\nwhile True:\n    "#,
        r#"sys.stdout.write('#' * 5000 + '\\r')\n    sys.stdout.flush()\n    time.sleep(0.01)\n"]"#,
        "\n"
    ));
    fs::write(repo.join("omnidev.toml"), profile)?;
    let pod = headless(omnidev, dir, &repo, &dir.join("out.txt"))?;
    control_socket(dir)?;
    let mut mcp = Mcp::start(omnidev, dir, &repo)?;
    let start = Instant::now();
    let mut calls = 0;
    let (most, bytes) = (5000, 1 << 20);
    while start.elapsed() < Duration::from_secs(30) {
        for service in ["printer", "spinner"] {
            mcp.tool(
                "logs",
                &serde_json::json!({"service": service, "lines": most, "max_bytes": bytes}),
            )?;
        }
        mcp.tool("events", &serde_json::json!({"limit": 1000, "max_bytes": bytes, "logs": true}))?;
        calls += 3;
    }
    let peak = mcp.peak();
    let lines = printed(&repo);
    drop(mcp);
    drop(pod);
    let figure = format!(
        "{} after {calls} calls at their maxima while {lines} lines of 200 KB went by",
        mib(peak)
    );
    if peak > 64 * MIB {
        bail!("{figure}: over 64 MiB");
    }
    Ok((figure, "was 270 MB, then 72 MiB (issue #77)".to_owned()))
}

/// Peak RSS and time of `omnidev profile check` on
/// [`many_services_profile`]`(5_000, 10_000)`, run by `prlimit` under a
/// 4 GiB address-space cap (a copy per service would need far more, and
/// fails instead of taking the machine).
fn many_services(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    let repo = dir.join("repo");
    fs::create_dir_all(repo.join(".git"))?;
    let profile = many_services_profile(5_000, 10_000);
    fs::write(repo.join("omnidev.toml"), &profile)?;
    let started = Instant::now();
    let args = ["profile", "check", "--repo"].map(std::ffi::OsStr::new);
    let (checked, peak) =
        timed(omnidev, dir, Some(4 << 30), &[&args[..], &[repo.as_os_str()]].concat())?;
    let took = started.elapsed();
    if !checked.status.success() {
        bail!(
            "profile check failed ({}): {}",
            checked.status,
            String::from_utf8_lossy(&checked.stderr)
        );
    }
    Ok((
        format!("{}, {:.2} s", mib(peak), took.as_secs_f64()),
        format!("a {} KB profile", profile.len() / 1000),
    ))
}

/// `status --json` of a running pod of 50 services, each measured then
/// (their processes' memory and CPU are read when asked): the median of
/// 20 asks.
fn status_of_50(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    let repo = dir.join("repo");
    fs::create_dir_all(repo.join(".git"))?;
    let mut profile = String::new();
    for n in 0..50 {
        let _ =
            writeln!(profile, "[services.s{n}]\ncommand = [\"sleep\", \"600\"]\ngrace-ms = 500\n");
    }
    fs::write(repo.join("omnidev.toml"), &profile)?;
    let _pods = Pods { omnidev, dir, repos: vec![repo.clone()] };
    let up = omnidev_in(omnidev, dir).args(["up", "--detach", "--repo"]).arg(&repo).output()?;
    if !up.status.success() {
        bail!("up failed: {}", String::from_utf8_lossy(&up.stderr));
    }
    let mut took = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let status =
            omnidev_in(omnidev, dir).args(["status", "--json", "--repo"]).arg(&repo).output()?;
        took.push(started.elapsed());
        let text = String::from_utf8_lossy(&status.stdout);
        if !text.contains("\"usage\"") {
            bail!("no usage in the status: {text}");
        }
    }
    took.sort();
    Ok((
        format!("{:.1} ms median of 20", took[10].as_secs_f64() * 1000.0),
        "50 services, one process each".to_owned(),
    ))
}

/// Stops the pods of `repos` (state under `dir`) when dropped.
struct Pods<'a> {
    omnidev: &'a Path,
    dir: &'a Path,
    repos: Vec<PathBuf>,
}

impl Drop for Pods<'_> {
    fn drop(&mut self) {
        for repo in &self.repos {
            let _ = omnidev_in(self.omnidev, self.dir)
                .args(["stop", "--repo"])
                .arg(repo)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A page's stream of the pod `name`: read to its end on a thread, which
/// gives the bytes read.
fn page_stream(port: u16, token: &str, name: &str) -> Result<std::thread::JoinHandle<u64>> {
    use std::io::Read as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "GET /api/events?pod={name}&token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    Ok(std::thread::spawn(move || {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut read = 0;
        while let Ok(n) = stream.read(&mut chunk) {
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        read
    }))
}

/// Pods `repo0` … under `dir`, each running one service `s` whose command
/// (a TOML array) `command(i)` gives, detached; stopped when dropped.
fn detached_pods<'a>(
    omnidev: &'a Path,
    dir: &'a Path,
    count: usize,
    command: impl Fn(usize) -> &'static str,
) -> Result<Pods<'a>> {
    let mut pods = Pods { omnidev, dir, repos: Vec::new() };
    for i in 0..count {
        let repo = dir.join(format!("repo{i}"));
        fs::create_dir_all(repo.join(".git"))?;
        fs::write(repo.join("omnidev.toml"), format!("[services.s]\ncommand = {}\n", command(i)))?;
        let started = omnidev_in(omnidev, dir)
            .args(["up", "--detach", "--repo"])
            .arg(&repo)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !started.success() {
            bail!("up --detach of {} failed", repo.display());
        }
        pods.repos.push(repo);
    }
    Ok(pods)
}

/// `omnidev dashboard` over the pods under `dir`, with a page's stream of
/// each pod open: the dashboard, its pid, and the streams.
fn dashboard_with_pages(
    omnidev: &Path,
    dir: &Path,
) -> Result<(Guard, u32, Vec<std::thread::JoinHandle<u64>>)> {
    use std::io::BufRead as _;
    let mut child = omnidev_in(omnidev, dir)
        .arg("dashboard")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let dashboard = Guard(child);
    let pid = dashboard.0.id();
    let mut said = String::new();
    std::io::BufReader::new(stdout).read_line(&mut said)?;
    let url = said
        .trim()
        .strip_prefix("dashboard http://127.0.0.1:")
        .with_context(|| format!("no URL: {said}"))?;
    let (port, token) = url.split_once("/?token=").context("no secret")?;
    let port: u16 = port.parse()?;
    let mut names = Vec::new();
    for entry in fs::read_dir(dir.join("cache/omnidev"))? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let pages =
        (names.iter()).map(|name| page_stream(port, token, name)).collect::<Result<Vec<_>>>()?;
    Ok((dashboard, pid, pages))
}

fn dashboard_rss(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    const FLOOD: Duration = Duration::from_secs(10);
    let mut pods = detached_pods(omnidev, dir, 10, |i| {
        if i == 0 {
            r#"["python3", "-c", "import sys\nwhile True: sys.stdout.write('x' * 200 + '\\n')"]"#
        } else {
            r#"["sleep", "3600"]"#
        }
    })?;
    let (dashboard, pid, pages) = dashboard_with_pages(omnidev, dir)?;
    let before = rss(pid, false);
    let start = Instant::now();
    let mut peak = 0;
    while start.elapsed() < FLOOD {
        peak = peak.max(rss(pid, false));
        std::thread::sleep(Duration::from_millis(50));
    }
    peak = peak.max(rss(pid, true));
    // The flood's pod stops (its page's stream ends); nine pages stay open
    // on pods that print nothing.
    let flooding = pods.repos.remove(0);
    let stopped = omnidev_in(omnidev, dir)
        .args(["stop", "--repo"])
        .arg(&flooding)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !stopped.success() {
        bail!("stop of the flooding pod failed");
    }
    std::thread::sleep(Duration::from_secs(2));
    let idle_from = cpu_time(pid)?;
    let idle = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let used = cpu_time(pid)?.saturating_sub(idle_from);
    let cpu = 100.0 * used.as_secs_f64() / idle.elapsed().as_secs_f64();
    drop(dashboard);
    let read: u64 = pages.into_iter().filter_map(|page| page.join().ok()).sum();
    Ok((
        format!(
            "{} before the pages, peak {} while the pages read {} MB in {} s; idle CPU {cpu:.2}% of one core over 5 s",
            mib(before),
            mib(peak),
            read / 1_000_000,
            FLOOD.as_secs()
        ),
        "10 detached pods, pod 0 writing 200-byte lines as fast as it can".to_owned(),
    ))
}

/// The cost of showing usage live: 10 idle pods, a page following each
/// (each asks its pod's status every 2 s), for 60 s.
pub(super) fn dashboard_idle(omnidev: &Path, dir: &Path) -> Row {
    one(
        omnidev,
        dir,
        "omnidev dashboard: 10 idle pods, a page following each, 60 s (usage told every 2 s)",
        "dashboard-idle",
        dashboard_idle_cpu,
        "issue #82: the cost of measuring while someone looks; target < 1% of one core",
    )
}

fn dashboard_idle_cpu(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    const FOR: Duration = Duration::from_mins(1);
    let _pods = detached_pods(omnidev, dir, 10, |_| r#"["sleep", "3600"]"#)?;
    let supervisors: Vec<u32> = (fs::read_dir(dir.join("cache/omnidev"))?)
        .map(|entry| -> Result<u32> {
            let status = omnidev_in(omnidev, dir)
                .args(["status", "--json", "--pod-dir"])
                .arg(entry?.path())
                .output()?;
            let status: serde_json::Value = serde_json::from_slice(&status.stdout)?;
            let pid = status["pid"].as_u64().context("a supervisor's pid")?;
            Ok(u32::try_from(pid)?)
        })
        .collect::<Result<_>>()?;
    let (dashboard, pid, pages) = dashboard_with_pages(omnidev, dir)?;
    std::thread::sleep(Duration::from_secs(2));
    let cpu_of = |pids: &[u32]| -> Result<Duration> {
        pids.iter().map(|&pid| cpu_time(pid)).sum::<Result<Duration>>()
    };
    let (dash_from, pods_from) = (cpu_time(pid)?, cpu_of(&supervisors)?);
    let start = Instant::now();
    std::thread::sleep(FOR);
    let took = start.elapsed().as_secs_f64();
    let dash = cpu_time(pid)?.saturating_sub(dash_from);
    let pods = cpu_of(&supervisors)?.saturating_sub(pods_from);
    drop(dashboard);
    let read: u64 = pages.into_iter().filter_map(|page| page.join().ok()).sum();
    let percent = |used: Duration| 100.0 * used.as_secs_f64() / took;
    Ok((
        format!(
            "dashboard {:.2}% of one core, the 10 supervisors {:.2}% together, over {} s; the pages read {} KB",
            percent(dash),
            percent(pods),
            FOR.as_secs(),
            read / 1000
        ),
        "10 detached pods of one `sleep` each; a page's stream of each open".to_owned(),
    ))
}
