//! Log-path benchmark: one service printing N lines of about 90 bytes,
//! through the supervisor into its log file and one subscriber, against the
//! same producer piped to `cat > file`, in the same run. Prints one JSON line:
//!
//! ```text
//! {"lines":1000000,"raw_s":0.41,"supervised_s":0.52,"ratio":1.27,"max_rss_mib":9.8,...}
//! ```
//!
//! Usage: `log_throughput [LINES] [--producer CMD]` (CMD receives the line
//! count in `$N`). Used by `cargo bench -p omnidev-core` and `cargo xtask bench`.
#![allow(
    clippy::print_stdout,
    clippy::naive_bytecount,
    clippy::cast_precision_loss
)]

use std::time::{Duration, Instant};

use omnidev_core::{EventKind, LogConfig, ServiceSpec, Supervisor, SupervisorConfig};
use tokio::sync::broadcast::error::RecvError;

/// 9-digit counter + space + 80 characters + newline = 91 bytes per line.
const PRODUCER: &str = r#"python3 -c '
import os, sys
n = int(os.environ["N"])
w = sys.stdout.write
pad = "x" * 80
for i in range(n):
    w(f"{i:09d} {pad}\n")
'"#;

fn max_rss_kib() -> i64 {
    // SAFETY: getrusage writes into the struct we pass.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &raw mut usage);
        usage.ru_maxrss
    }
}

#[tokio::main]
async fn main() -> omnidev_core::Result<()> {
    let mut lines: u64 = 1_000_000;
    let mut producer = PRODUCER.to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--producer" {
            producer = args.next().unwrap_or(producer);
        } else if let Ok(n) = arg.parse() {
            lines = n;
        }
    }
    let dir = tempfile::tempdir().map_err(|source| omnidev_core::Error::Write {
        path: std::env::temp_dir(),
        source,
    })?;

    // Raw: the same producer piped to `cat > file`.
    let raw_file = dir.path().join("raw.log");
    let started = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{producer} | cat > '{}'", raw_file.display()))
        .env("N", lines.to_string())
        .status();
    let raw = started.elapsed();
    let raw_ok = status.is_ok_and(|s| s.success());

    // Supervised: into the log file and one subscriber.
    let mut service = ServiceSpec::new("producer", "sh", ["-c", producer.as_str()], dir.path());
    service.command.env.insert("N".into(), lines.to_string());
    service.restart = omnidev_core::RestartPolicy::Never;
    let log_dir = dir.path().join("logs");
    let started = Instant::now();
    let supervisor = Supervisor::start(SupervisorConfig {
        services: vec![service],
        log: LogConfig {
            dir: Some(log_dir.clone()),
            // Large enough that rotation does not drop lines we count.
            max_file_bytes: 1 << 30,
            ..LogConfig::default()
        },
        ..SupervisorConfig::default()
    })
    .await?;
    let mut events = supervisor.subscribe();
    let subscriber = tokio::spawn(async move {
        let (mut received, mut dropped) = (0u64, 0u64);
        loop {
            match events.recv().await {
                Ok(event) => {
                    if matches!(event.kind, EventKind::Log { .. }) {
                        received += 1;
                    }
                }
                Err(RecvError::Lagged(n)) => dropped += n,
                Err(RecvError::Closed) => break,
            }
        }
        (received, dropped)
    });
    let settled = supervisor.wait_settled().await;
    let supervised = started.elapsed();
    supervisor.shutdown().await?;
    let file_lines = std::fs::read(log_dir.join("producer.log"))
        .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count());
    drop(supervisor);
    let (received, dropped) = tokio::time::timeout(Duration::from_secs(5), subscriber)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let rss_mib = max_rss_kib() as f64 / 1024.0;
    println!(
        "{{\"lines\":{lines},\"raw_s\":{:.3},\"raw_ok\":{raw_ok},\"supervised_s\":{:.3},\"ratio\":{:.2},\"max_rss_mib\":{rss_mib:.1},\"file_lines\":{file_lines},\"subscriber_received\":{received},\"subscriber_dropped\":{dropped},\"service_ok\":{}}}",
        raw.as_secs_f64(),
        supervised.as_secs_f64(),
        supervised.as_secs_f64() / raw.as_secs_f64(),
        settled.success,
    );
    Ok(())
}
