//! `omnidev logs -f` against the supervisor's real log writer rotating its
//! file many times between two polls: every line once, in order.

#[path = "support/context.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::{TestContext, wait_for};
use omnidev_core::{LogConfig, RestartPolicy, ServiceSpec, Supervisor, SupervisorConfig};

const LINES: u64 = 20_000;

#[test]
fn follow_sees_every_line_once_across_rotations() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.svc]\ncommand = [\"true\"]\n");
    let pod = ctx.root.join("pod");
    std::fs::create_dir_all(&pod).expect("pod dir");
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
        .block_on(Supervisor::start(SupervisorConfig {
            services: vec![service],
            log: LogConfig {
                dir: Some(pod.join("logs")),
                // About 700 lines per file: ~28 rotations in the burst.
                max_file_bytes: 64 * 1024,
                keep_files: 100,
                ..LogConfig::default()
            },
            ..SupervisorConfig::default()
        }))
        .expect("supervisor");

    let log = pod.join("logs/svc.log");
    wait_for("the first line", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("start"))
    });
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
    assert!(
        rotated.exists(),
        "the burst rotated the file at least 20 times"
    );
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
    let status = follow.wait().expect("wait");
    assert!(status.success(), "{status:?}");
}
