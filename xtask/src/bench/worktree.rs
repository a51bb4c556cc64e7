//! A new worktree (issue 30): `omnidev up` on a fresh checkout, from launch
//! to every service ready, with the full stack against the backend path
//! alone (`--no-vite`: server, then host), each on a checkout of its own.
//! A third case, the UI path alone (`--only vite`: the install, then
//! Vite), gives each round its floor: the full stack cannot be ready
//! before the longer of the two paths would be on its own.
//!
//! The checkout is a copy of the tracked files of
//! `examples/omnigent-example`, or with `cargo xtask bench --checkout DIR`
//! a new `git worktree` of DIR (a real Omnigent, say; removed afterwards),
//! so nothing is installed yet: no `.venv`, no `node_modules`. The caches
//! (uv's, pnpm's store) are whatever the machine has: warm after one run.
//! The cases rotate, so all see the same load.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Guard, Row, poll};
use crate::util;

/// The longest a fresh checkout may take to be ready (a real Omnigent
/// builds its venv and installs 1,255 npm packages).
const READY_LIMIT: Duration = Duration::from_mins(10);

/// The row; `checkout` as `--checkout` gives it.
pub(super) fn row(omnidev: &Path, dir: &Path, checkout: Option<&Path>, rounds: usize) -> Row {
    let source = checkout.map_or_else(
        || "examples/omnigent-example (a copy of its tracked files)".to_owned(),
        |c| format!("a new git worktree of {}", c.display()),
    );
    let mut reference = format!("backend path (--no-vite) not measured; {source}");
    let figure = (|| -> Result<String> {
        let mut runs: [Vec<Ready>; 3] = Default::default();
        let load = load_average();
        for round in 0..rounds {
            // Who goes first rotates, so each case sees the same load.
            for step in 0..Case::ALL.len() {
                let case = Case::ALL[(round + step) % Case::ALL.len()];
                let name = format!("{}-{round}", case.name());
                let ready = fresh_up(omnidev, &dir.join(name), checkout, case)?;
                runs[case as usize].push(ready);
            }
        }
        let [full, backend, ui] = &runs;
        let spread =
            |runs: &[Ready]| runs.iter().map(Ready::to_string).collect::<Vec<_>>().join("; ");
        let worst = |runs: &[Ready]| runs.iter().map(|r| r.all).max().unwrap_or_default();
        let (full_worst, backend_worst) = (worst(full), worst(backend));
        // The floor of a round: the full stack cannot be ready before the
        // longer of its two paths would be alone.
        let floors: Vec<Duration> = backend.iter().zip(ui).map(|(b, u)| b.all.max(u.all)).collect();
        reference = format!(
            "backend path (--no-vite): {}; the UI path alone (--only vite): {}; target: full <= backend + 1 s; load {load}; {source}",
            spread(backend),
            spread(ui),
        );
        let slower = full_worst.as_secs_f64() - backend_worst.as_secs_f64();
        let full_median = median_of(full.iter().map(|r| r.all)).as_secs_f64();
        let median_gap = full_median - median_of(backend.iter().map(|r| r.all)).as_secs_f64();
        let over_floor = full_median - median_of(floors.into_iter()).as_secs_f64();
        Ok(format!(
            "full stack: {} (slowest run {:+.1} s, median {:+.1} s against the backend's; median {:+.1} s against the longer path alone)",
            spread(full),
            slower,
            median_gap,
            over_floor,
        ))
    })();
    Row { name: "new worktree: full stack vs backend path", figure, reference }
}

/// What one run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Every service.
    Full,
    /// `--no-vite`: the server, then the host.
    Backend,
    /// `--only vite`: the install, then Vite, with nothing beside them.
    Ui,
}

impl Case {
    const ALL: [Self; 3] = [Self::Full, Self::Backend, Self::Ui];

    fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Backend => "backend",
            Self::Ui => "ui",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Self::Full => &[],
            Self::Backend => &["--no-vite"],
            Self::Ui => &["--only", "vite"],
        }
    }

    fn services(self) -> &'static [&'static str] {
        match self {
            Self::Full => &["server", "host", "vite"],
            Self::Backend => &["server", "host"],
            Self::Ui => &["vite"],
        }
    }
}

/// The median of `times` (the mean of the middle two for an even count).
fn median_of(times: impl Iterator<Item = Duration>) -> Duration {
    let mut all: Vec<Duration> = times.collect();
    all.sort();
    match all.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => all[n / 2],
        n => (all[n / 2 - 1] + all[n / 2]) / 2,
    }
}

/// One run's times from launch: each service's ready, and all of them.
struct Ready {
    services: Vec<(String, Duration)>,
    all: Duration,
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let each: Vec<String> = self
            .services
            .iter()
            .map(|(name, at)| format!("{name} {:.1} s", at.as_secs_f64()))
            .collect();
        write!(f, "{:.1} s ({})", self.all.as_secs_f64(), each.join(", "))
    }
}

/// The 1-minute load average.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A fresh checkout at `dir/checkout`, `omnidev up --headless --json` on
/// it (what `case` starts) until each of its services is ready, then the
/// pod stopped and the checkout removed.
fn fresh_up(omnidev: &Path, dir: &Path, checkout: Option<&Path>, case: Case) -> Result<Ready> {
    fs::create_dir_all(dir)?;
    let repo = dir.join("checkout");
    let _worktree = fresh_checkout(&repo, checkout)?;
    let events = dir.join("events.jsonl");
    let mut command = Command::new(omnidev);
    command
        .args(["up", "--headless", "--json", "--repo"])
        .arg(&repo)
        .arg("--pod-dir")
        .arg(dir.join("pod"))
        .stdin(Stdio::null())
        .stdout(fs::File::create(&events)?)
        .stderr(Stdio::null());
    command.args(case.args());
    let wanted = case.services();
    let launched = Instant::now();
    let mut pod = Guard(command.spawn()?);
    let mut ready: Vec<(String, Duration)> = Vec::new();
    poll(READY_LIMIT, || {
        if let Ok(Some(status)) = pod.0.try_wait() {
            return Some(Err(anyhow::anyhow!("omnidev exited with {status}")));
        }
        let text = fs::read_to_string(&events).ok()?;
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let service = record["service"].as_str().unwrap_or_default();
            let kind = record["kind"].as_str().unwrap_or_default();
            if kind == "state" && record["state"] == "failed" {
                return Some(Err(anyhow::anyhow!(
                    "{service} failed: {}",
                    record["reason"].as_str().unwrap_or_default()
                )));
            }
            if kind == "ready" && !ready.iter().any(|(s, _)| s == service) {
                ready.push((service.to_owned(), launched.elapsed()));
            }
        }
        wanted.iter().all(|w| ready.iter().any(|(s, _)| s == w)).then_some(Ok(()))
    })
    .with_context(|| format!("not every service of {} was ready", repo.display()))??;
    let all = ready.iter().map(|(_, at)| *at).max().unwrap_or_default();
    drop(pod);
    Ok(Ready { services: ready, all })
}

/// A worktree that removes itself when dropped.
struct Worktree {
    source: PathBuf,
    path: PathBuf,
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.source)
            .args(["worktree", "remove", "--force"])
            .arg(&self.path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `repo` made fresh: a `git worktree` of `checkout`, or a copy of the
/// example's tracked files.
fn fresh_checkout(repo: &Path, checkout: Option<&Path>) -> Result<Option<Worktree>> {
    if let Some(source) = checkout {
        let status = Command::new("git")
            .arg("-C")
            .arg(source)
            .args(["worktree", "add", "--quiet", "--detach"])
            .arg(repo)
            .arg("HEAD")
            .status()?;
        if !status.success() {
            bail!("git worktree add of {} failed ({status})", source.display());
        }
        return Ok(Some(Worktree { source: source.to_path_buf(), path: repo.to_path_buf() }));
    }
    let root = util::workspace_root();
    let listed = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "-z", "examples/omnigent-example"])
        .output()?;
    if !listed.status.success() {
        bail!("git ls-files of examples/omnigent-example failed");
    }
    let example = root.join("examples/omnigent-example");
    for name in listed.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = Path::new(std::str::from_utf8(name)?);
        let relative = name.strip_prefix("examples/omnigent-example")?;
        let to = repo.join(relative);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(example.join(relative), &to)?;
    }
    fs::create_dir_all(repo.join(".git"))?;
    Ok(None)
}
