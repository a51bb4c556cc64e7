//! The edit–fix loop on the stub checkout: reload latency over 20 edits
//! (p50 and p90 of what omnidev adds to the stub's own boot), and a fix
//! that arrives while the crashed server waits out a backoff.
//!
//! Both a reload and the stub's own boot are timed by the same loop: a
//! `GET /health` every 2 ms ([`poll`]) until a server (for a reload: a new
//! pid) answers. The boot is sampled twice per edit, between edits, so the
//! two see the same load; the overhead at a percentile is the reload's
//! minus the boot's at that percentile.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::{Guard, Row, free_port, health_pid, millis, poll, stub_server};

/// The stub profile's debounce.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The `p`-th percentile (0–100) of `samples`, nearest rank.
fn percentile(samples: &[Duration], p: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// One boot of the stub server on its own: spawn to `/health` answering,
/// polled exactly as the reloads are (the same [`poll`], every 2 ms).
fn stub_boot(repo: &Path) -> Result<Duration> {
    let port = free_port()?;
    let start = Instant::now();
    let server = stub_server(repo, port)?;
    // Its own answer: on a shared machine a free port can be taken by
    // someone else's server the moment after it was picked.
    let pid = server.0.id().to_string();
    poll(Duration::from_secs(30), || health_pid(port).filter(|answered| *answered == pid))?;
    let took = start.elapsed();
    drop(server);
    Ok(took)
}

/// Both rows; `up(port, output)` starts `omnidev up --headless` on the stub
/// checkout with its output to `output`.
pub(super) fn rows(
    repo: &Path,
    dir: &Path,
    up: &dyn Fn(u16, &Path) -> Command,
    edits: u32,
) -> Vec<Row> {
    let latency = reload_latency(repo, dir, up);
    let boot_text = match &latency {
        Ok(measured) => format!("boot p50 {}", millis(percentile(&measured.boots, 50))),
        Err(e) => format!("boot unavailable: {e:#}"),
    };
    let backoff = backoff_fix(repo, dir, up);
    let side = side_by_side(repo, dir, up, edits);
    vec![
        Row {
            name: "up: reload over 20 edits, overhead p50/p90",
            figure: latency
                .as_ref()
                .map(Reloads::figure)
                .map_err(|e| anyhow::anyhow!("{e:#}")),
            reference: latency.as_ref().map_or_else(
                |_| "target p90 <= debounce 100 ms + 50 ms".to_owned(),
                Reloads::reference,
            ),
        },
        Row {
            name: "reload beside watchexec -r, p50/p90/max",
            figure: side
                .as_ref()
                .map(|(omnidev, _)| format!("omnidev {}", spread(omnidev)))
                .map_err(|e| anyhow::anyhow!("{e:#}")),
            reference: side.as_ref().map_or_else(
                |_| "watchexec -r (not measured)".to_owned(),
                |(omnidev, watchexec)| {
                    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                    format!(
                        "watchexec -r {} ({edits} edits each, same run, interleaved; omnidev - watchexec: p50 {:+.1} ms, p90 {:+.1} ms)",
                        spread(watchexec),
                        ms(percentile(omnidev, 50)) - ms(percentile(watchexec, 50)),
                        ms(percentile(omnidev, 90)) - ms(percentile(watchexec, 90)),
                    )
                },
            ),
        },
        Row {
            name: "up: crash in 4 s backoff -> fixed -> ready",
            figure: backoff,
            reference: format!(
                "target <= debounce + boot + 50 ms (was: the backoff's end); {boot_text}"
            ),
        },
    ]
}

/// Each edit's time from the write to a new server answering, and two
/// boots of the stub on its own measured after each edit (so both see the
/// same load: the machine is shared, and its load moves within minutes).
struct Reloads {
    samples: Vec<Duration>,
    boots: Vec<Duration>,
}

impl Reloads {
    /// What omnidev adds at a percentile, in milliseconds: the reload's
    /// minus the stub's own boot's, at that percentile. (Less the boot's
    /// median, the p90 would count the stub's own slow boots as omnidev's.)
    /// Negative when the boots' spread is wider than what omnidev adds.
    fn overhead(&self, p: usize) -> f64 {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        ms(percentile(&self.samples, p)) - ms(percentile(&self.boots, p))
    }

    fn figure(&self) -> String {
        format!(
            "{:.2} ms / {:.2} ms (reload p50 {}, p90 {}, max {})",
            self.overhead(50),
            self.overhead(90),
            millis(percentile(&self.samples, 50)),
            millis(percentile(&self.samples, 90)),
            millis(percentile(&self.samples, 100)),
        )
    }

    fn reference(&self) -> String {
        format!(
            "target p90 <= debounce 100 ms + 50 ms; stub's own boot p50 {}, p90 {} ({} runs)",
            millis(percentile(&self.boots, 50)),
            millis(percentile(&self.boots, 90)),
            self.boots.len(),
        )
    }
}

/// Whether a `/health` answer (a pid) comes from a child of `omnidev`:
/// only the pod's server counts. While it restarts its port is free, and
/// another program on this shared machine may take it and answer.
fn started_by(omnidev: u32) -> impl Fn(&String) -> bool {
    move |answered| {
        answered
            .parse()
            .ok()
            .and_then(omnidev_core::platform::stat)
            .is_some_and(|s| s.ppid == omnidev)
    }
}

/// 20 edits, each timed from the write to a new server answering
/// `/health`, with two boots of the stub on its own after each.
fn reload_latency(repo: &Path, dir: &Path, up: &dyn Fn(u16, &Path) -> Command) -> Result<Reloads> {
    let port = free_port()?;
    let pod = Guard(up(port, &dir.join("reload.log")).spawn()?);
    let pods = started_by(pod.0.id());
    let mut pid = poll(Duration::from_mins(1), || health_pid(port).filter(&pods))?;
    let mut samples = Vec::new();
    let mut boots = Vec::new();
    for round in 1..=20 {
        // Let the previous reload (and the host after it) settle, with two
        // of the stub's own boots in the middle of that pause.
        std::thread::sleep(Duration::from_millis(300));
        boots.push(stub_boot(repo)?);
        boots.push(stub_boot(repo)?);
        std::thread::sleep(Duration::from_millis(400));
        let written = Instant::now();
        fs::write(repo.join("src/app.py"), format!("VALUE = {round}\n"))?;
        pid = poll(Duration::from_secs(30), || {
            health_pid(port).filter(|now| *now != pid && pods(now))
        })?;
        samples.push(written.elapsed());
    }
    Ok(Reloads { samples, boots })
}

fn spread(samples: &[Duration]) -> String {
    format!(
        "{} / {} / {}",
        millis(percentile(samples, 50)),
        millis(percentile(samples, 90)),
        millis(percentile(samples, 100))
    )
}

/// omnidev and `watchexec -r` (from PATH; skipped with the reason when it
/// is not there — CI need not have it) each restarting the stub server of
/// a checkout of its own on a `.py` write, with the same 100 ms debounce;
/// the edits alternate between the two (who goes first alternates too), so
/// both see the same load. Each edit is timed from the write to a new pid
/// answering `/health`, polled every 2 ms.
fn side_by_side(
    repo: &Path,
    dir: &Path,
    up: &dyn Fn(u16, &Path) -> Command,
    edits: u32,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(watchexec) = crate::prereqs::find_program("watchexec", &path) else {
        bail!(
            "watchexec is not on PATH, so the side-by-side row is skipped \
             (`cargo install watchexec-cli` to measure it)"
        );
    };
    let other = dir.join("watchexec-checkout");
    super::stub_checkout(&other)?;
    let port = free_port()?;
    let pod = Guard(up(port, &dir.join("side-by-side.log")).spawn()?);
    let pods = started_by(pod.0.id());
    let wport = free_port()?;
    let watcher = Guard(
        Command::new(&watchexec)
            .args(["--restart", "--shell=none", "--debounce", "100ms"])
            .args(["--watch", "src", "--exts", "py", "--"])
            .arg(super::python())
            .arg(other.join("stub_server.py"))
            .arg(wport.to_string())
            .arg(other.join("src/app.py"))
            .current_dir(&other)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let theirs_only = started_by(watcher.0.id());
    let mut pid = poll(Duration::from_mins(1), || health_pid(port).filter(&pods))?;
    let mut wpid = poll(Duration::from_mins(1), || health_pid(wport).filter(&theirs_only))?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let edit = |file: &Path, port: u16, last: &str, by: &dyn Fn(&String) -> bool, round: u32| {
        std::thread::sleep(Duration::from_millis(700));
        let written = Instant::now();
        fs::write(file, format!("VALUE = {round}\n"))?;
        let pid = poll(Duration::from_secs(30), || {
            health_pid(port).filter(|now| now != last && by(now))
        })?;
        Ok::<_, anyhow::Error>((pid, written.elapsed()))
    };
    for round in 1..=edits {
        for turn in 0..2 {
            if (round + turn) % 2 == 0 {
                let (new, took) = edit(&repo.join("src/app.py"), port, &pid, &pods, round)?;
                pid = new;
                ours.push(took);
            } else {
                let (new, took) =
                    edit(&other.join("src/app.py"), wport, &wpid, &theirs_only, round)?;
                wpid = new;
                theirs.push(took);
            }
        }
    }
    drop(watcher);
    drop(pod);
    Ok((ours, theirs))
}

/// A syntax error crashes the stub until its backoff reaches 4 s; the fix
/// is written then, and timed to the server answering `/health`.
fn backoff_fix(repo: &Path, dir: &Path, up: &dyn Fn(u16, &Path) -> Command) -> Result<String> {
    let port = free_port()?;
    let log = dir.join("backoff.log");
    let pod = Guard(up(port, &log).spawn()?);
    let pods = started_by(pod.0.id());
    poll(Duration::from_mins(1), || health_pid(port).filter(&pods))?;
    let app = repo.join("src/app.py");
    fs::write(&app, "def broken(:\n")?;
    poll(Duration::from_mins(1), || {
        fs::read_to_string(&log).ok()?.contains("restart #3 in 4s").then_some(())
    })?;
    let fixed = Instant::now();
    fs::write(&app, "VALUE = 0\n")?;
    poll(Duration::from_secs(30), || health_pid(port).filter(&pods))?;
    let took = fixed.elapsed();
    if took >= Duration::from_secs(3) {
        bail!("the fix waited for the backoff: {}", millis(took));
    }
    Ok(format!("{} (debounce {})", millis(took), millis(DEBOUNCE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50), Duration::from_millis(10));
        assert_eq!(percentile(&samples, 90), Duration::from_millis(18));
        assert_eq!(percentile(&samples, 100), Duration::from_millis(20));
    }

    #[test]
    fn the_overhead_is_taken_percentile_by_percentile() {
        let ms = Duration::from_millis;
        let reloads = Reloads {
            samples: (1..=10).map(|i| ms(300 + 10 * i)).collect(),
            boots: (1..=10).map(|i| ms(200 + 5 * i)).collect(),
        };
        // p50: 350 - 225; p90: 390 - 245.
        assert!((reloads.overhead(50) - 125.0).abs() < 1e-6);
        assert!((reloads.overhead(90) - 145.0).abs() < 1e-6);
        let noisy = Reloads { samples: vec![ms(300); 10], boots: vec![ms(310); 10] };
        assert!(noisy.figure().starts_with("-10.00 ms / -10.00 ms"), "{}", noisy.figure());
        assert!(reloads.figure().starts_with("125.00 ms / 145.00 ms"));
        assert!(reloads.reference().contains("p50 225.00 ms, p90 245.00 ms (10 runs)"));
    }
}
