//! `omnidev logs` against the supervisor's real log writer: `-f` while the
//! file rotates many times between two polls (every line once, in order),
//! and `--since-reload [--json]` on a running pod and a stopped one.

#[path = "support/context.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use assert_cmd::assert::Assert;
use common::{TestContext, wait_for};
use omnidev_core::{Changes, LogConfig, RestartPolicy, ServiceSpec, Supervisor, SupervisorConfig};
use predicates::prelude::*;
use predicates::str::contains;

const LINES: u64 = 20_000;

#[test]
fn follow_sees_every_line_once_across_rotations() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.svc]\ncommand = [\"true\"]\n");
    let pod = ctx.root.join("pod");
    // A pod omnidev made (its identity written), as `--pod-dir` wants.
    omnidev_pod::Pod::create(&pod, &["logs".to_owned()]).expect("pod dir");
    let go = ctx.root.join("go");
    let script = format!(
        "echo start; while [ ! -f '{}' ]; do sleep 0.02; done; \
         i=0; while [ $i -lt {LINES} ]; do printf '%09d %s\\n' $i \
         xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; \
         i=$((i+1)); done",
        go.display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The test holds the pod's lock, so `logs -f` follows a running pod.
    let lock = omnidev_pod::PodLock::acquire(&pod).expect("lock");
    let mut service = ServiceSpec::new("svc", "sh", ["-c", script.as_str()], &ctx.root);
    service.restart = RestartPolicy::Never;
    let supervisor = runtime
        .block_on(
            Supervisor::builder(SupervisorConfig {
                services: vec![service],
                log: LogConfig {
                    dir: Some(pod.join("logs")),
                    // About 700 lines per file: ~28 rotations in the burst.
                    max_file_bytes: 64 * 1024,
                    keep_files: 100,
                    ..LogConfig::default()
                },
                ..SupervisorConfig::default()
            })
            .expect("a valid graph")
            .run(),
        )
        .expect("supervisor");

    let log = pod.join("logs/svc.log");
    wait_for("the first line", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("start"))
    });
    // Spawned, not through `assert_cmd`: the follower's lines are read
    // while the pod still writes.
    let mut follow = ctx
        .command()
        .args(["logs", "svc", "-f", "--pod-dir"])
        .arg(&pod)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn logs -f");
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("start"));
    std::fs::write(&go, "").expect("go");

    let settled = runtime.block_on(supervisor.wait_settled());
    assert!(settled.success, "{settled:?}");
    let rotated = omnidev_core::logs::rotated_path(&log, 20);
    assert!(rotated.exists(), "the burst rotated the file at least 20 times");
    let mut expected = 0;
    for line in lines.by_ref() {
        let line = line.expect("read");
        let number: u64 = line[..9].parse().expect("a numbered line");
        assert_eq!(number, expected, "line {number} where {expected} was due");
        expected += 1;
        if expected == LINES {
            break;
        }
    }
    assert_eq!(expected, LINES);
    // The pod stops: `logs -f` ends on its own, with nothing more.
    runtime.block_on(supervisor.shutdown()).expect("shutdown");
    drop(lock);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.is_empty(), "nothing twice: {rest:?}");
    let output = follow.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(said, "omnidev: the pod stopped: done following\n");

    // Following a pod that has stopped prints its last lines, says there
    // is nothing more to follow, and ends with exit 0.
    let followed = logs(&ctx, &pod, &["svc", "-f", "-n", "2"]).success().stderr(
        "omnidev: the pod is not running: nothing more to follow (`omnidev up` starts it)\n",
    );
    let stdout = common::stdout(&followed);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains(&format!("{:09}", LINES - 1)), "{stdout}");
}

/// `omnidev logs ARGS --pod-dir POD` run to its end, for assertions.
fn logs(ctx: &TestContext, pod: &std::path::Path, args: &[&str]) -> Assert {
    ctx.cmd().arg("logs").args(args).arg("--pod-dir").arg(pod).assert()
}

/// The `line` of each record of `logs --json` output of `svc` in `pod`,
/// each checked against the published schema.
fn log_lines(text: &str, pod: &std::path::Path) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/events.schema.json"
        ))
        .expect("the schema file"),
    )
    .expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let errors: Vec<String> =
                validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{line}: {errors:?}");
            assert_eq!(value["kind"], "log");
            assert_eq!(value["service"], "svc");
            assert_eq!(value["stream"], "merged");
            assert_eq!(value["pod"], pod.display().to_string());
            value["line"].as_str().expect("a line").to_owned()
        })
        .collect()
}

#[test]
fn since_reload_prints_the_lines_after_the_last_reload_as_text_and_records() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.svc]\ncommand = [\"true\"]\n");
    let pod = ctx.root.join("pod");
    let log = pod.join("logs/svc.log");
    omnidev_pod::Pod::create(&pod, &["logs".to_owned()]).expect("pod dir");
    std::fs::write(&log, "a line of the previous run\n").expect("old log");
    // Each run says which it is (a counter file), and its last words (and
    // not the shell's `Terminated` for its `sleep`, unordered on stderr).
    let count = ctx.root.join("runs");
    let script = format!(
        "exec 2>/dev/null; n=$(( $(cat '{c}' 2>/dev/null || echo 0) + 1 )); echo $n > '{c}'; \
         trap 'echo run $n stopping; exit 0' TERM; echo run $n started; \
         while :; do sleep 0.05; done",
        c = count.display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let lock = omnidev_pod::PodLock::acquire(&pod).expect("lock");
    let mut other =
        ServiceSpec::new("other", "sh", ["-c", "echo other up; exec sleep 600"], &ctx.root);
    other.restart = RestartPolicy::Never;
    let supervisor = runtime
        .block_on(
            Supervisor::builder(SupervisorConfig {
                services: vec![
                    ServiceSpec::new("svc", "sh", ["-c", script.as_str()], &ctx.root),
                    other,
                ],
                log: LogConfig { dir: Some(pod.join("logs")), ..LogConfig::default() },
                ..SupervisorConfig::default()
            })
            .expect("a valid graph")
            .run(),
        )
        .expect("supervisor");
    let file_has = |path: &std::path::Path, text: &str| {
        std::fs::read_to_string(path).is_ok_and(|t| t.contains(text))
    };
    wait_for("run 1", Duration::from_secs(60), || {
        file_has(&log, "run 1 started") && file_has(&pod.join("logs/other.log"), "other up")
    });

    // No reload yet: this run's lines, not the previous run's.
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "--since-reload"]).success());
    assert_eq!(out, "run 1 started\n");

    runtime
        .block_on(supervisor.reload_changed(&["svc"], Changes::of(["app/main.py"])))
        .expect("reload");
    wait_for("run 2", Duration::from_secs(60), || file_has(&log, "run 2 started"));
    let expected = "run 1 stopping\nrun 2 started\n";
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "--since-reload"]).success());
    assert_eq!(out, expected, "the old run's last words come after the reload");
    // Every service: `other` printed nothing since.
    let out = common::stdout(&logs(&ctx, &pod, &["--since-reload"]).success());
    assert_eq!(out, "svc   | run 1 stopping\nsvc   | run 2 started\n");
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "other", "-n", "1"]).success());
    assert_eq!(out, "svc   | run 2 started\nother | other up\n");

    // The records validate against the published schema.
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "--since-reload", "--json"]).success());
    assert_eq!(log_lines(&out, &pod), ["run 1 stopping", "run 2 started"]);

    // Stopped: the mark on disk still answers, with the last words.
    runtime.block_on(supervisor.shutdown()).expect("shutdown");
    drop(lock);
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "--since-reload", "--json"]).success());
    assert_eq!(log_lines(&out, &pod), ["run 1 stopping", "run 2 started", "run 2 stopping"]);
    let out = common::stdout(&logs(&ctx, &pod, &["svc", "--json"]).success());
    assert_eq!(
        log_lines(&out, &pod).first().map(String::as_str),
        Some("a line of the previous run")
    );

    // Without the mark, a clear error rather than a guess.
    std::fs::remove_file(pod.join("logs").join(omnidev_core::logs::MARK_FILE)).expect("rm");
    logs(&ctx, &pod, &["svc", "--since-reload"])
        .failure()
        .stdout("")
        .stderr(contains("reload-mark.json").and(contains("omnidev up")));
}
