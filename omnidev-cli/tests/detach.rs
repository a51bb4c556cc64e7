//! `up --detach` hands its options to the background process as data:
//! `--detach`, `--clean` and `--ready-timeout` in both spellings, and
//! services named like those flags, run what was asked. Real processes.

#[path = "support/context.rs"]
mod common;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;

use common::TestContext;
use predicates::str::contains;

/// Services named like the flags `up --detach` acts on itself (and like a
/// flag's value), and one that is never ready.
fn profile(closed: u16) -> String {
    format!(
        r#"
[services.clean]
command = ["sh", "-c", "echo clean up; exec sleep 300"]
grace-ms = 1000

[services.detach]
command = ["sh", "-c", "echo detach up; exec sleep 300"]
grace-ms = 1000

[services.30]
command = ["sh", "-c", "echo 30 up; exec sleep 300"]
grace-ms = 1000

[services.ready-timeout]
command = ["sleep", "300"]
ready = {{ tcp = "127.0.0.1:{closed}", interval-ms = 100, timeout-ms = 600000 }}
grace-ms = 1000
"#
    )
}

/// The services of the running pod that run, sorted.
fn running(ctx: &TestContext) -> Vec<String> {
    let status = ctx.json(&["status", "--json"]);
    let mut names: Vec<String> = status["services"]
        .as_array()
        .expect("services")
        .iter()
        .filter(|s| s["pid"].is_u64())
        .map(|s| s["name"].as_str().expect("name").to_owned())
        .collect();
    names.sort();
    names
}

fn pod_dir(ctx: &TestContext) -> PathBuf {
    ctx.pod_dir().expect("the pod directory")
}

#[test]
fn detach_runs_what_its_flags_ask_in_either_spelling() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(omnidev_test_support::free_port()));
    let _stop = ctx.stop_on_drop();

    // `--ready-timeout VALUE`, and a service named like that value.
    ctx.run_ok(&["up", "--detach", "--ready-timeout", "30", "--only", "30"]);
    assert_eq!(running(&ctx), ["30"]);
    let log_of_30 = pod_dir(&ctx).join("logs/30.log");
    assert!(log_of_30.is_file(), "{}", log_of_30.display());
    ctx.run_ok(&["stop"]);

    // `--ready-timeout=VALUE` and `--clean`: the pod directory is cleaned
    // (the first run's log is gone) and services named `detach` and
    // `clean` run (`--only=detach`, `--only clean`).
    ctx.assert(&[
        "up",
        "--clean",
        "--detach",
        "--ready-timeout=30",
        "--only=detach",
        "--only",
        "clean",
        "--skip=30",
    ])
    .success()
    .stderr(contains("removed"));
    assert!(!log_of_30.exists(), "--clean kept {}", log_of_30.display());
    assert_eq!(running(&ctx), ["clean", "detach"]);
    ctx.run_ok(&["stop"]);

    // Bare flags (no `up`), `--detach` last: the timeout given is the one
    // waited for (exit 4, timed out), for the service named
    // `ready-timeout`; the pod keeps running it.
    ctx.assert(&["--only", "ready-timeout", "--ready-timeout=1", "--detach"])
        .code(4)
        .stderr(contains("--ready-timeout"));
    assert_eq!(running(&ctx), ["ready-timeout"]);
    ctx.run_ok(&["stop"]);
    ctx.assert(&["up", "--detach", "--only", "ready-timeout", "--ready-timeout", "1"]).code(4);
    assert_eq!(running(&ctx), ["ready-timeout"]);
}

#[test]
fn the_background_process_refuses_options_it_cannot_read() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(1));
    // `omnidev detached` fed `input` on its standard input: it must refuse
    // it (exit 1) saying why and what to run instead; what it said.
    let refused = |input: &[u8]| -> String {
        let mut child = ctx
            .command()
            .arg("detached")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        // Too much input is refused without reading it all: the pipe may
        // be closed before every byte is written.
        let _ = stdin.write_all(input);
        drop(stdin);
        let output = child.wait_with_output().expect("wait");
        let text = ctx.render(&output);
        let shown = String::from_utf8_lossy(&input[..input.len().min(80)]);
        assert_eq!(output.status.code(), Some(1), "{shown:?}\n{text}");
        assert!(text.contains("unreadable options"), "{shown:?}\n{text}");
        assert!(text.contains("omnidev up --detach"), "{shown:?}\n{text}");
        text
    };
    // What the user sees, whole: the error and its help.
    let text = refused(b"not json");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
    refused(b"{\"pod-dir\": \"/x\", \"options\": {}, \"extra\": 1}");
    refused(b"");
    let text = refused(b"{\"pod-dir\": \"/\xff\"}");
    assert!(text.contains("not UTF-8"), "{text}");
    // Past 4 MiB (JSON whitespace, then more than the pipe holds).
    let text = refused(&vec![b' '; 8 << 20]);
    assert!(text.contains("more than 4194304 bytes"), "{text}");
    // Nothing was started: no pod directory.
    assert_eq!(ctx.pod_dir(), None);
}

/// Eight `up --detach` at once on a fresh checkout (no pod directory
/// yet): one pod starts, and every caller exits 0 naming it (its pid),
/// once it is ready.
#[test]
fn racing_detaches_start_one_pod_and_all_succeed() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.web]\ncommand = [\"sh\", \"-c\", \"sleep 0.3; echo up; exec sleep 300\"]\nready = { log = \"up\" }\ngrace-ms = 1000\n",
    );
    let _stop = ctx.stop_on_drop();
    let racers: Vec<_> = (0..8).map(|_| ctx.spawn(&["up", "--detach"])).collect();
    let pids: Vec<String> = racers
        .into_iter()
        .map(|racer| {
            let output = racer.wait_with_output().expect("wait");
            let text = ctx.render(&output);
            assert!(output.status.success(), "{text}");
            let out = String::from_utf8_lossy(&output.stdout);
            let at = out.find("(pid ").unwrap_or_else(|| panic!("no pid: {text}"));
            out[at..].split(')').next().unwrap_or_default().to_owned()
        })
        .collect();
    let status = ctx.json(&["status", "--json"]);
    let pid = format!("(pid {}", status["pid"]);
    assert!(pids.iter().all(|p| *p == pid), "{pids:?}, the pod's {pid}");
    assert_eq!(status["services"][0]["ready"], true, "{status}");
}

/// A detached pod whose service floods 200 KB lines: its own output file,
/// `omnidev.log`, rotates as it is written (never past its 10 MiB cap by
/// more than one line, which the writer cuts at 64 KiB), and every line is
/// in it or a rotated file.
#[test]
fn a_flood_keeps_the_detached_pods_own_log_within_its_cap() {
    const LINES: usize = 120;
    const CAP: u64 = 10 * 1024 * 1024;
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[services.flood]
command = ["python3", "-u", "-c", "import sys\nfor i in range({LINES}): sys.stdout.write('%04d ' % i + 'x' * 200000 + '\\n')\nsys.stdout.flush()\nprint('flooded', flush=True)\nimport time\ntime.sleep(300)"]
ready = {{ log = "^flooded" }}
grace-ms = 1000
"#
        ),
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let logs = pod_dir(&ctx).join("logs");
    let own = logs.join("omnidev.log");
    let files = || -> Vec<PathBuf> {
        std::iter::once(own.clone())
            .chain((1..=3).map(|n| logs.join(format!("omnidev.log.{n}"))))
            .filter(|p| p.exists())
            .collect()
    };
    // The lines that begin a flood line (the writer cuts a line longer
    // than 64 KiB into pieces): `flood   | 0042 xxx…`.
    let read =
        || -> Vec<Vec<u8>> { files().iter().map(|p| std::fs::read(p).expect("read")).collect() };
    let starts = |texts: &[Vec<u8>]| -> usize {
        texts
            .iter()
            .flat_map(|text| text.split(|b| *b == b'\n'))
            .filter(|line| {
                line.strip_prefix(b"flood   | ").is_some_and(|rest| {
                    rest.len() > 5 && rest[..4].iter().all(u8::is_ascii_digit) && rest[4] == b' '
                })
            })
            .count()
    };
    // The headless printer may still be writing the flood out: its last
    // line comes after it.
    omnidev_test_support::poll_until(
        "the end of the flood in omnidev.log",
        std::time::Duration::from_secs(60),
        || read().iter().any(|text| text.windows(17).any(|w| w == b"flood   | flooded")),
    );
    assert_eq!(starts(&read()), LINES);
    let files = files();
    assert!(files.len() >= 3, "it rotated: {files:?}");
    for file in &files {
        let size = std::fs::metadata(file).expect("size").len();
        assert!(
            size <= CAP + 64 * 1024 + 100,
            "{} is {size} bytes, over its cap and one line",
            file.display()
        );
    }
    ctx.run_ok(&["stop"]);
}
