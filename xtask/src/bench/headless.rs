//! Headless throughput through the `omnidev` binary: a service printing
//! 1,000,000 lines of 91 bytes, all of them delivered to stdout, against
//! the same producer writing to a file itself and piped to `cat > file`
//! in the same run, with omnidev's own CPU a line (its process's, not the
//! producer's); then the same with a reader that stalls 5 s before
//! reading.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Row;

const LINES: u64 = 1_000_000;
const ROUNDS: usize = 5;
const STALL: Duration = Duration::from_secs(5);

/// The burst checkout of the CLI's tests: `$BURST_LINES` lines of 91 bytes.
const PRODUCER: &str = include_str!("../../../omnidev-cli/tests/fixtures/burst/burst.py");
const PROFILE: &str = include_str!("../../../omnidev-cli/tests/fixtures/burst/omnidev.toml");

/// One timed run.
struct Run {
    elapsed: Duration,
    peak_rss_kib: u64,
    /// The CPU time of the first process alone (not its children's), read
    /// once it has exited and before it is reaped.
    own_cpu: Duration,
}

/// Peak resident set of `pid` so far (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    omnidev_core::platform::peak_rss_kib(pid).unwrap_or(0)
}

/// Whether `pid`, a child of this process, has exited, leaving it
/// unreaped (its `/proc` entry still tells its final CPU time).
#[cfg(target_os = "linux")]
fn exited_unreaped(pid: u32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    !matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::StillAlive) | Err(_))
}

/// Elsewhere (nix has no `waitid` on macOS) the CPU time is read at every
/// poll: the last reading before the exit stands.
#[cfg(not(target_os = "linux"))]
fn exited_unreaped(_pid: u32) -> bool {
    true
}

/// Waits for `children` (the first is sampled for its peak RSS and its
/// own CPU time).
fn wait_all(children: &mut [Child], started: Instant) -> Result<Run> {
    let mut peak = 0;
    let mut own_cpu = Duration::ZERO;
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        if !done[0] {
            peak = peak.max(peak_rss_kib(children[0].id()));
            if exited_unreaped(children[0].id())
                && let Some(cpu) = omnidev_core::platform::cpu_time(children[0].id())
            {
                own_cpu = cpu;
            }
        }
        for (child, done) in children.iter_mut().zip(done.iter_mut()) {
            if !*done && let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("a process of the run failed with {status}");
                }
                *done = true;
            }
        }
        if started.elapsed() > Duration::from_mins(5) {
            for child in children.iter_mut() {
                let _ = child.kill();
            }
            bail!("the run did not finish within 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(Run { elapsed: started.elapsed(), peak_rss_kib: peak, own_cpu })
}

/// The reader: `cat > out`, after `stall`.
fn reader(out: &Path, stall: Duration) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(format!("sleep {}; exec cat > '{}'", stall.as_secs_f64(), out.display()));
    command
}

/// The producer alone, piped into the reader (sampled: its own CPU is the
/// floor of reading the pipe and writing the file, which omnidev pays too).
fn raw(repo: &Path, out: &Path, stall: Duration) -> Result<Run> {
    let started = Instant::now();
    let mut producer = Command::new("python3")
        .arg(repo.join("burst.py"))
        .env("BURST_LINES", LINES.to_string())
        .stdout(Stdio::piped())
        .spawn()?;
    let pipe = producer.stdout.take().context("producer stdout")?;
    let cat = reader(out, stall).stdin(pipe).spawn()?;
    let run = wait_all(&mut [cat, producer], started)?;
    if count_lines(out, "")? != LINES {
        bail!("the raw pipe lost lines");
    }
    Ok(run)
}

/// The producer alone, writing to `out` itself.
fn direct(repo: &Path, out: &Path) -> Result<Run> {
    let started = Instant::now();
    let producer = Command::new("python3")
        .arg(repo.join("burst.py"))
        .env("BURST_LINES", LINES.to_string())
        .stdout(fs::File::create(out)?)
        .spawn()?;
    let run = wait_all(&mut [producer], started)?;
    if count_lines(out, "")? != LINES {
        bail!("the producer lost lines");
    }
    Ok(run)
}

/// `omnidev up --headless` of the burst checkout, piped into the reader.
fn headless(omnidev: &Path, repo: &Path, home: &Path, out: &Path, stall: Duration) -> Result<Run> {
    let started = Instant::now();
    let mut pod = Command::new(omnidev)
        .args(["up", "--headless", "--repo"])
        .arg(repo)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("BURST_LINES", LINES.to_string())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pipe = pod.stdout.take().context("omnidev stdout")?;
    let cat = reader(out, stall).stdin(pipe).spawn()?;
    let run = wait_all(&mut [pod, cat], started)?;
    let delivered = count_lines(out, "burst")?;
    if delivered != LINES {
        bail!("headless output delivered {delivered} of {LINES} lines");
    }
    Ok(run)
}

/// Lines of `path` starting with `tag` (all lines for ""), checking that
/// their numbers run 0, 1, 2, … with none missing or repeated.
fn count_lines(path: &Path, tag: &str) -> Result<u64> {
    let mut expected = 0u64;
    for line in BufReader::new(fs::File::open(path)?).lines() {
        let line = line?;
        let Some(rest) = line.strip_prefix(tag) else {
            continue;
        };
        let number = rest.trim_start_matches([' ', '|']);
        let Some(number) = number.get(..9).and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        if number != expected {
            bail!("line {number} where {expected} was due");
        }
        expected += 1;
    }
    Ok(expected)
}

/// The two rows: straight to a file, and with a reader stalling 5 s.
pub(super) fn rows(omnidev: &Path, dir: &Path) -> Vec<Row> {
    let repo = dir.join("burst");
    let home = dir.join("home");
    let prepared = (|| -> Result<()> {
        fs::create_dir_all(repo.join(".git"))?;
        fs::create_dir_all(&home)?;
        fs::write(repo.join("burst.py"), PRODUCER)?;
        fs::write(repo.join("omnidev.toml"), PROFILE)?;
        Ok(())
    })();
    let out = dir.join("out.txt");
    let mut rows = Vec::new();
    for (name, stall) in [
        ("headless: 1M lines to a file (all delivered)", Duration::ZERO),
        ("headless: 1M lines, reader stalls 5 s", STALL),
    ] {
        let mut reference = String::from("(not measured)");
        let figure = (|| -> Result<String> {
            prepared.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
            // Alternate so all see the same machine load; best of each, and
            // the median of omnidev's own CPU.
            let mut best_raw = Duration::MAX;
            let mut best_direct = Duration::MAX;
            let mut best: Option<Run> = None;
            let mut peak = 0;
            let mut own = Vec::new();
            let mut cat_cpu = Vec::new();
            for _ in 0..ROUNDS {
                let raw = raw(&repo, &out, stall)?;
                best_raw = best_raw.min(raw.elapsed);
                cat_cpu.push(raw.own_cpu);
                if stall.is_zero() {
                    best_direct = best_direct.min(direct(&repo, &out)?.elapsed);
                }
                let run = headless(omnidev, &repo, &home, &out, stall)?;
                peak = peak.max(run.peak_rss_kib);
                own.push(run.own_cpu);
                if best.as_ref().is_none_or(|b| run.elapsed < b.elapsed) {
                    best = Some(run);
                }
            }
            let _ = fs::remove_file(&out);
            let best = best.context("no run")?;
            let own = super::median(own);
            let per_line = own.as_nanos() / u128::from(LINES);
            let cat_per_line = super::median(cat_cpu).as_nanos() / u128::from(LINES);
            if stall.is_zero() {
                let ratio = best.elapsed.as_secs_f64() / best_direct.as_secs_f64();
                reference = format!(
                    "producer > file: {:.2} s, producer | cat > file: {:.2} s (cat's own CPU \
                     {cat_per_line} ns a line); targets: wall <= 1.05x producer > file, own CPU \
                     <= 250 ns a line",
                    best_direct.as_secs_f64(),
                    best_raw.as_secs_f64()
                );
                return Ok(format!(
                    "{:.2} s ({ratio:.2}x), own CPU {per_line} ns a line ({:.2} s), peak RSS {} \
                     MiB",
                    best.elapsed.as_secs_f64(),
                    own.as_secs_f64(),
                    peak.div_ceil(1024)
                ));
            }
            let ratio = best.elapsed.as_secs_f64() / best_raw.as_secs_f64();
            reference =
                format!("producer | (sleep 5; cat > file): {:.2} s", best_raw.as_secs_f64());
            Ok(format!(
                "{:.2} s ({ratio:.2}x), own CPU {per_line} ns a line, peak RSS {} MiB",
                best.elapsed.as_secs_f64(),
                peak.div_ceil(1024)
            ))
        })();
        rows.push(Row { name, figure, reference });
    }
    rows
}
