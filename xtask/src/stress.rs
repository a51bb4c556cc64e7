//! `cargo xtask stress N` (and `cargo xtask ci --stress N`): the workspace
//! tests and the e2e cases, N times each, with as many busy loops beside
//! them as the machine has cores, then one report: every test or case that
//! failed at least once, how often, and its first failure. A test that is
//! green only on a quiet machine shows up here instead of in someone's CI.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::flags::Stress;

/// What a failure report keeps of a test's output (its panic message and
/// the lines around it), in bytes.
const EXCERPT: usize = 1_500;

/// Busy loops on every core until dropped.
struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    fn start(count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) + 1);
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Failures seen so far: test name → (times failed, first failure).
#[derive(Default)]
struct Tally(BTreeMap<String, (usize, String)>);

impl Tally {
    fn add(&mut self, name: &str, excerpt: &str) {
        let entry = self.0.entry(name.to_owned()).or_insert_with(|| (0, excerpt.to_owned()));
        entry.0 += 1;
    }
}

/// `pid` and every process below it, parents first (the platform seam's
/// view of children).
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut next = 0;
    while let Some(&parent) = all.get(next) {
        all.extend(omnidev_core::platform::children(parent));
        next += 1;
    }
    all
}

/// Runs `command` to its end, or kills it and every process below it
/// once `limit` has passed; its output, and whether it ended in time. It
/// stays in this process's group, so a Ctrl-C reaches it as it reaches
/// the hogs' process.
fn output_within(mut command: Command, limit: Duration) -> Result<(std::process::Output, bool)> {
    use nix::sys::signal::{Signal, kill};
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut stderr = child.stderr.take().context("stderr")?;
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut bytes);
        bytes
    });
    let start = Instant::now();
    let mut in_time = true;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if in_time && start.elapsed() > limit {
            in_time = false;
            // Our child, not reaped yet, and what runs below it: stopped
            // first, so none forks or reaps past the walk, then killed.
            let pid = |p: u32| nix::unistd::Pid::from_raw(p as i32);
            for p in tree(child.id()) {
                let _ = kill(pid(p), Signal::SIGSTOP);
            }
            for p in tree(child.id()) {
                let _ = kill(pid(p), Signal::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok((std::process::Output { status, stdout, stderr }, in_time))
}

/// `cargo test`'s arguments for `packages` (none: the workspace).
fn scope(packages: &[String]) -> Vec<String> {
    if packages.is_empty() {
        return vec!["--workspace".to_owned()];
    }
    packages.iter().flat_map(|p| ["-p".to_owned(), p.clone()]).collect()
}

pub fn run(options: &Stress) -> Result<()> {
    let root = crate::util::workspace_root();
    let scope = scope(&options.packages);
    let skip_e2e = options.skip_e2e || !options.packages.is_empty();
    // Built once, before the hogs start: the runs measure the tests, not
    // the compiler.
    let built = Command::new("cargo")
        .arg("test")
        .args(&scope)
        .arg("--no-run")
        .current_dir(&root)
        .status()
        .context("running cargo test --no-run")?;
    if !built.success() {
        bail!("the workspace tests do not build");
    }
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let hogs = options.hogs.unwrap_or(cores);
    println!(
        "stress: {} run(s) of the tests of {}{}, {hogs} busy loop(s) beside them",
        options.runs,
        scope.join(" "),
        if skip_e2e { "" } else { " and the e2e cases" }
    );
    let _hogs = Hogs::start(hogs);
    let mut tally = Tally::default();
    let total = Instant::now();
    for run in 1..=options.runs {
        let start = Instant::now();
        let mut command = Command::new("cargo");
        command.arg("test").args(&scope).arg("--no-fail-fast").current_dir(&root);
        let limit = Duration::from_secs(options.run_timeout);
        let (output, in_time) = output_within(command, limit)?;
        let text = String::from_utf8_lossy(&output.stdout);
        let failed = test_failures(&text);
        for (name, excerpt) in &failed {
            tally.add(name, excerpt);
        }
        if !in_time {
            tally.add("(a run past --run-timeout, killed)", tail(&text));
        }
        if !output.status.success() && failed.is_empty() {
            // A binary that crashed or did not start names no test.
            let stderr = String::from_utf8_lossy(&output.stderr);
            tally.add("(cargo test itself)", tail(&stderr));
        }
        println!(
            "stress: tests run {run}: {} failed, {:.0}s",
            failed.len(),
            start.elapsed().as_secs_f64()
        );
        if skip_e2e {
            continue;
        }
        let start = Instant::now();
        let xtask = std::env::current_exe().context("finding xtask itself")?;
        let output = Command::new(xtask)
            .arg("test-e2e")
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .context("running the e2e cases")?;
        let text = String::from_utf8_lossy(&output.stdout);
        let failed = e2e_failures(&text);
        for (name, excerpt) in &failed {
            tally.add(&format!("e2e {name}"), excerpt);
        }
        if !output.status.success() && failed.is_empty() {
            tally.add("(e2e itself)", tail(&String::from_utf8_lossy(&output.stderr)));
        }
        println!(
            "stress: e2e run {run}: {} failed, {:.0}s",
            failed.len(),
            start.elapsed().as_secs_f64()
        );
    }
    println!(
        "stress: {} run(s) in {:.0}s; {} test(s) failed at least once",
        options.runs,
        total.elapsed().as_secs_f64(),
        tally.0.len()
    );
    for (name, (count, excerpt)) in &tally.0 {
        println!("\n{name}: failed {count} of {}\n{excerpt}", options.runs);
    }
    if tally.0.is_empty() { Ok(()) } else { bail!("{} test(s) failed under load", tally.0.len()) }
}

/// The last bytes of a text, cut at a character boundary.
fn tail(text: &str) -> &str {
    let mut from = text.len().saturating_sub(EXCERPT);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

/// The first bytes of a text, cut at a character boundary.
fn head(text: &str) -> &str {
    let mut to = text.len().min(EXCERPT);
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    &text[..to]
}

/// Each failed test of libtest's output, with what it printed (the
/// `---- NAME stdout ----` section; the name alone when there is none).
fn test_failures(text: &str) -> Vec<(String, String)> {
    let mut failed: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("test ")?.strip_suffix(" ... FAILED")?;
            Some((name.to_owned(), String::new()))
        })
        .collect();
    for (name, excerpt) in &mut failed {
        let header = format!("---- {name} stdout ----\n");
        if let Some(at) = text.find(&header) {
            let body = &text[at + header.len()..];
            let end =
                body.find("\n---- ").or_else(|| body.find("\nfailures:\n")).unwrap_or(body.len());
            head(body[..end].trim_end()).clone_into(excerpt);
        }
    }
    failed
}

/// Each failed e2e case (`FAIL name (…s): why`).
fn e2e_failures(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("FAIL ")?;
            let name = rest.split_whitespace().next()?;
            Some((name.to_owned(), head(rest).to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_failures_are_named_with_their_output() {
        let text = "running 3 tests\ntest a::one ... ok\ntest a::two ... FAILED\n\
                    test b::three ... FAILED\n\nfailures:\n\n---- a::two stdout ----\n\
                    thread 'a::two' panicked at src/a.rs:3:5:\nleft: 3\n\n\
                    ---- b::three stdout ----\nboom\n\nfailures:\n    a::two\n    b::three\n";
        let failed = test_failures(text);
        assert_eq!(
            failed,
            vec![
                (
                    "a::two".to_owned(),
                    "thread 'a::two' panicked at src/a.rs:3:5:\nleft: 3".to_owned()
                ),
                ("b::three".to_owned(), "boom".to_owned()),
            ]
        );
    }

    #[test]
    fn e2e_failures_are_named() {
        let text = "ok   up_starts (3.1s)\nFAIL attach_tui (9.0s): no pane\n1 passed, 1 failed\n";
        assert_eq!(
            e2e_failures(text),
            vec![("attach_tui".to_owned(), "attach_tui (9.0s): no pane".to_owned())]
        );
    }

    #[test]
    fn excerpts_are_cut_at_character_boundaries() {
        let text = "é".repeat(EXCERPT);
        assert!(head(&text).len() <= EXCERPT);
        assert!(tail(&text).len() <= EXCERPT);
    }
}
