//! The edit–fix loop on the stub checkout: reload latency over 20 edits
//! (p50 and p90 of what omnidev adds to the stub's own boot), and a fix
//! that arrives while the crashed server waits out a backoff.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::{Guard, Row, free_port, health_pid, median, millis, poll};

/// The stub profile's debounce.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The `p`-th percentile (0–100) of `samples`, nearest rank.
fn percentile(samples: &[Duration], p: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The stub server's own boot: spawn to `/health`, median of 5.
fn stub_boot(repo: &Path) -> Result<Duration> {
    let port = free_port()?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let server = Guard(
            Command::new("python3")
                .arg(repo.join("stub_server.py"))
                .arg(port.to_string())
                .arg(repo.join("src/app.py"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        poll(Duration::from_secs(30), || health_pid(port))?;
        samples.push(start.elapsed());
        drop(server);
    }
    Ok(median(samples))
}

/// Both rows; `up(port, output)` starts `omnidev up --headless` on the stub
/// checkout with its output to `output`.
pub(super) fn rows(repo: &Path, dir: &Path, up: &dyn Fn(u16, &Path) -> Command) -> Vec<Row> {
    let boot = stub_boot(repo);
    let boot_text = boot
        .as_ref()
        .map_or_else(|e| format!("unavailable: {e:#}"), |b| millis(*b));
    let latency = boot
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e:#}"))
        .and_then(|boot| reload_latency(repo, dir, up, *boot));
    let backoff = backoff_fix(repo, dir, up);
    vec![
        Row {
            name: "up: reload over 20 edits, overhead p50/p90",
            figure: latency,
            reference: format!(
                "target p90 <= debounce 100 ms + 50 ms; stub's own boot {boot_text}"
            ),
        },
        Row {
            name: "up: crash in 4 s backoff -> fixed -> ready",
            figure: backoff,
            reference: format!(
                "target <= debounce + boot + 50 ms (was: the backoff's end); boot {boot_text}"
            ),
        },
    ]
}

/// 20 edits, each timed from the write to a new server answering
/// `/health`, less the stub's own boot.
fn reload_latency(
    repo: &Path,
    dir: &Path,
    up: &dyn Fn(u16, &Path) -> Command,
    boot: Duration,
) -> Result<String> {
    let port = free_port()?;
    let _pod = Guard(up(port, &dir.join("reload.log")).spawn()?);
    let mut pid = poll(Duration::from_mins(1), || health_pid(port))?;
    let mut samples = Vec::new();
    for round in 1..=20 {
        // Let the previous reload (and the host after it) settle.
        std::thread::sleep(Duration::from_millis(700));
        let written = Instant::now();
        fs::write(repo.join("src/app.py"), format!("VALUE = {round}\n"))?;
        pid = poll(Duration::from_secs(30), || {
            health_pid(port).filter(|now| *now != pid)
        })?;
        samples.push(written.elapsed());
    }
    let overhead: Vec<Duration> = samples.iter().map(|s| s.saturating_sub(boot)).collect();
    Ok(format!(
        "{} / {} (total p50 {}, p90 {}, max {})",
        millis(percentile(&overhead, 50)),
        millis(percentile(&overhead, 90)),
        millis(percentile(&samples, 50)),
        millis(percentile(&samples, 90)),
        millis(percentile(&samples, 100)),
    ))
}

/// A syntax error crashes the stub until its backoff reaches 4 s; the fix
/// is written then, and timed to the server answering `/health`.
fn backoff_fix(repo: &Path, dir: &Path, up: &dyn Fn(u16, &Path) -> Command) -> Result<String> {
    let port = free_port()?;
    let log = dir.join("backoff.log");
    let _pod = Guard(up(port, &log).spawn()?);
    poll(Duration::from_mins(1), || health_pid(port))?;
    let app = repo.join("src/app.py");
    fs::write(&app, "def broken(:\n")?;
    poll(Duration::from_mins(1), || {
        fs::read_to_string(&log)
            .ok()?
            .contains("restart #3 in 4s")
            .then_some(())
    })?;
    let fixed = Instant::now();
    fs::write(&app, "VALUE = 0\n")?;
    poll(Duration::from_secs(30), || health_pid(port))?;
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
}
