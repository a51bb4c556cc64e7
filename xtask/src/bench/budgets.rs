//! Memory budgets through the `omnidev` binary, each figure against the
//! budget the docs state and the finding of issue #25 it fixes:
//!
//! - the TUI (in tmux) while a service prints a 5 MB line every 0.5 s for
//!   30 s (the finding's own rate and length);
//! - `omnidev up --headless` with 32 `events -f --logs` followers that
//!   never read, while a service prints lines of control bytes (JSON
//!   escapes each six-fold), and after they left;
//! - `omnidev up --headless` of a checkout whose `.gitignore` has 30,000
//!   rules, watched by three rules, through a reload.

use std::fs;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Guard, Row, Tmux, poll};

const MIB: u64 = 1024 * 1024;

#[path = "../../../omnidev-cli/tests/support/budgets.rs"]
mod shared;

use shared::{many_rules, printer_profile, watched_profile};

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
    fs::write(
        repo.join("omnidev.toml"),
        printer_profile(line, times, pause),
    )?;
    Ok(repo)
}

fn printed(repo: &Path) -> u64 {
    fs::read_to_string(repo.join("count"))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `omnidev up --headless` of `repo` with its state under `dir`, its
/// output in `out`.
fn headless(omnidev: &Path, dir: &Path, repo: &Path, out: &Path) -> Result<Guard> {
    Ok(Guard(
        Command::new(omnidev)
            .args(["up", "--headless", "--repo"])
            .arg(repo)
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("XDG_RUNTIME_DIR", dir.join("run"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
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

/// The three rows.
pub(super) fn rows(omnidev: &Path, dir: &Path) -> Vec<Row> {
    let run = |name: &str, measure: fn(&Path, &Path) -> Result<(String, String)>| {
        let scratch = dir.join(name);
        let result = fs::create_dir_all(&scratch)
            .map_err(anyhow::Error::from)
            .and_then(|()| measure(omnidev, &scratch));
        let _ = fs::remove_dir_all(&scratch);
        result
    };
    let row = |name: &'static str, result: Result<(String, String)>, budget: &str| {
        let (figure, reference) = match result {
            Ok((figure, reference)) => (Ok(figure), format!("{budget}; {reference}")),
            Err(e) => (Err(e), budget.to_owned()),
        };
        Row {
            name,
            figure,
            reference,
        }
    };
    vec![
        row(
            "TUI RSS, a 5 MB line every 0.5 s for 30 s (tmux)",
            run("tui", tui_rss),
            "budget < 200 MiB (panes: 4 MiB a service, 8 MiB combined)",
        ),
        row(
            "omnidev RSS, 32 stalled events -f --logs followers",
            run("followers", followers_rss),
            "budget: before + 32 x 2.5 MiB while they stall, before + 24 MiB after",
        ),
        row(
            "omnidev RSS, .gitignore of 30,000 rules, 3 watch rules",
            run("gitignore", gitignore_rss),
            "budget < 200 MiB peak (one compiled set per checkout)",
        ),
    ]
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
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "bench",
        "-x",
        "120",
        "-y",
        "40",
        &launch,
    ])?;
    let pid: u32 = tmux
        .run(&["display-message", "-p", "-t", "bench", "#{pane_pid}"])?
        .parse()?;
    poll(Duration::from_mins(1), || {
        (printed(&repo) >= 1).then_some(())
    })?;
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
        tmux.run(&["has-session", "-t", "bench"])
            .is_err()
            .then_some(())
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
    poll(Duration::from_mins(1), || {
        (printed(&repo) >= 200).then_some(())
    })?;
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
        bail!(
            "peak {}, {} after (before {}): over the budget",
            mib(peak),
            mib(after),
            mib(before)
        );
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
