//! Headless output loses nothing: a service printing a burst of numbered
//! lines, read through a pipe, into a file, and by a reader that pauses for
//! 5 s; every number arrives once, in order, and omnidev's peak memory stays
//! under the documented bound.

#[path = "support/context.rs"]
mod common;

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::TestContext;

/// The bound documented in `omnidev-cli/README.md` ("Headless output").
const PEAK_RSS_MIB: u64 = 64;

/// The burst checkout, shared with `cargo xtask bench`.
const BURST: &str = include_str!("fixtures/burst/burst.py");
const PROFILE: &str = include_str!("fixtures/burst/omnidev.toml");

#[derive(Debug, Clone, Copy)]
enum Reader {
    Pipe,
    File,
    /// A pipe whose reader starts reading only after this long.
    Paused(Duration),
}

/// Peak resident set of `pid` so far (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    omnidev_core::platform::peak_rss_kib(pid)
}

/// Waits for `child` (generous deadline), sampling its peak RSS until it
/// exits; returns the exit code and the last peak seen.
fn wait_sampling(child: &mut Child) -> (Option<i32>, u64) {
    let start = Instant::now();
    let mut peak = 0;
    loop {
        if let Some(kib) = peak_rss_kib(child.id()) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            return (status.code(), peak);
        }
        assert!(start.elapsed() < Duration::from_secs(300), "omnidev did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs a headless pod of `lines` lines read by `reader`. Spawned with a
/// plain `Command`, not `assert_cmd`: the test samples the process's
/// memory while it runs and reads (or pauses reading) its stdout itself.
fn burst(lines: u64, reader: Reader) {
    let ctx = TestContext::new();
    ctx.write("burst.py", BURST);
    ctx.write("omnidev.toml", PROFILE);
    let mut command = ctx.command();
    command.arg("--headless").env("BURST_LINES", lines.to_string()).stderr(Stdio::piped());
    let out_path = ctx.root.join("out.txt");
    let (code, peak, output) = match reader {
        Reader::File => {
            command.stdout(std::fs::File::create(&out_path).expect("create"));
            let mut child = command.spawn().expect("spawn");
            let (code, peak) = wait_sampling(&mut child);
            (code, peak, std::fs::read(&out_path).expect("read"))
        }
        Reader::Pipe | Reader::Paused(_) => {
            command.stdout(Stdio::piped());
            let mut child = command.spawn().expect("spawn");
            let mut stdout = child.stdout.take().expect("stdout");
            let pause = match reader {
                Reader::Paused(pause) => pause,
                _ => Duration::ZERO,
            };
            let read = std::thread::spawn(move || {
                std::thread::sleep(pause);
                let mut bytes = Vec::new();
                stdout.read_to_end(&mut bytes).expect("read stdout");
                bytes
            });
            let (code, peak) = wait_sampling(&mut child);
            (code, peak, read.join().expect("reader"))
        }
    };
    eprintln!("{reader:?}, {lines} lines: peak RSS {peak} KiB");
    let text = String::from_utf8(output).expect("utf-8");
    let mut expected = 0u64;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("burst   | ") {
            let number: u64 = rest[..9].parse().expect("a numbered line");
            assert_eq!(
                number, expected,
                "{reader:?}, {lines} lines: line {number} where {expected} was due"
            );
            expected += 1;
        }
    }
    assert_eq!(expected, lines, "{reader:?}: every line, once");
    assert!(
        text.trim_end().ends_with("omnidev | every service exited 0"),
        "{reader:?}: the summary comes after every line: {}",
        &text[text.len().saturating_sub(300)..]
    );
    assert!(!text.contains("fell behind"), "{reader:?}");
    assert_eq!(code, Some(0), "{reader:?}");
    assert!(
        peak < PEAK_RSS_MIB * 1024,
        "{reader:?}, {lines} lines: peak RSS {peak} KiB over {PEAK_RSS_MIB} MiB"
    );
    // The spool is gone with the run: the pod directory holds no stray file.
    let pod = ctx.pod_dir().expect("pod dir");
    let names: Vec<_> = std::fs::read_dir(&pod)
        .expect("pod dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            ![".omnidev-pod", "logs", "omnidev.lock", "pod.toml", "run", "state.json", "tmp"]
                .contains(&n.as_str())
        })
        .collect();
    assert!(names.is_empty(), "left in the pod dir: {names:?}");
}

const PAUSE: Duration = Duration::from_secs(5);

#[test]
fn burst_2k_pipe() {
    burst(2_000, Reader::Pipe);
}

#[test]
fn burst_2k_file() {
    burst(2_000, Reader::File);
}

#[test]
fn burst_2k_paused_reader() {
    burst(2_000, Reader::Paused(PAUSE));
}

#[test]
fn burst_20k_pipe() {
    burst(20_000, Reader::Pipe);
}

#[test]
fn burst_20k_file() {
    burst(20_000, Reader::File);
}

#[test]
fn burst_20k_paused_reader() {
    burst(20_000, Reader::Paused(PAUSE));
}

#[test]
fn burst_1m_pipe() {
    burst(1_000_000, Reader::Pipe);
}

#[test]
fn burst_1m_file() {
    burst(1_000_000, Reader::File);
}

#[test]
fn burst_1m_paused_reader() {
    burst(1_000_000, Reader::Paused(PAUSE));
}

#[test]
fn a_closed_stdout_is_reported_once_and_the_pod_runs_to_its_end() {
    let ctx = TestContext::new();
    ctx.write("burst.py", BURST);
    ctx.write("omnidev.toml", PROFILE);
    let mut child = ctx
        .command()
        .arg("--headless")
        .env("BURST_LINES", "20000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Like `| head -3`: three lines, then the pipe is closed.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).expect("first bytes");
    drop(stdout);
    let (code, _) = wait_sampling(&mut child);
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
    // Every service exited 0, but output that never reached its reader is
    // not a success for whoever ran this: exit 1 (as `| head` in hostile.rs).
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.matches("stdout is gone").count(), 1, "said once: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The service ran to its end; its log file has every line.
    let log = ctx.pod_dir().expect("pod").join("logs/burst.log");
    let text = std::fs::read_to_string(log).expect("log");
    assert_eq!(text.lines().count(), 20_000);
}
