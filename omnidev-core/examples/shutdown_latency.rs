//! Shutdown-latency benchmark: a service that crashes at once under a 30 s
//! backoff; once it is waiting out the backoff, `shutdown()` is timed. The
//! supervisor must not sit out the wait. Prints one JSON line:
//!
//! ```text
//! {"rounds":5,"median_ms":0.4,"max_ms":0.9,"backoff_s":30}
//! ```
//!
//! Usage: `shutdown_latency [ROUNDS]`. Used by `cargo xtask bench`.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use omnidev_core::{
    BackoffPolicy, EventKind, ServiceSpec, ServiceState, Supervisor, SupervisorConfig,
};

const BACKOFF: Duration = Duration::from_secs(30);

async fn one_round() -> omnidev_core::Result<Duration> {
    let service = ServiceSpec::new("crasher", "sh", ["-c", "exit 1"], ".");
    let builder = Supervisor::builder(SupervisorConfig {
        services: vec![service],
        backoff: BackoffPolicy { steps: vec![BACKOFF], reset_after: Duration::from_secs(20) },
        ..SupervisorConfig::default()
    })?;
    let mut events = builder.subscribe();
    let supervisor = builder.run().await?;
    while let Some(event) = events.recv().await {
        if matches!(event.kind, EventKind::State { state: ServiceState::Restarting { .. } }) {
            break;
        }
    }
    let started = Instant::now();
    supervisor.shutdown().await?;
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() -> omnidev_core::Result<()> {
    let rounds: usize = std::env::args().nth(1).and_then(|r| r.parse().ok()).unwrap_or(5).max(1);
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        samples.push(one_round().await?);
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{{\"rounds\":{rounds},\"median_ms\":{:.2},\"max_ms\":{:.2},\"backoff_s\":{}}}",
        ms(samples[rounds / 2]),
        ms(samples[rounds - 1]),
        BACKOFF.as_secs()
    );
    Ok(())
}
