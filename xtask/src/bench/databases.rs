//! A pod's own Postgres (issue #79): a new checkout's from nothing to
//! ready, `initdb` included, through `omnidev up --detach`; and what the
//! server and its workers hold idle. Run as an unprivileged user (Postgres
//! refuses root).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::Row;
use crate::as_user::AsUser;

/// Checkouts started, one after another: the median is shown.
const ROUNDS: usize = 3;

/// The row.
pub(super) fn row(omnidev: &Path, dir: &Path) -> Row {
    Row {
        name: "a new pod's Postgres: `up --detach` to ready (initdb included); idle PSS",
        figure: measure(omnidev, dir),
        reference: "issue #79 (no budget yet; Debian's Postgres 15 here)".to_owned(),
    }
}

fn measure(omnidev: &Path, dir: &Path) -> Result<String> {
    let user = AsUser::new(dir.to_path_buf(), omnidev)?;
    let mut took = Vec::new();
    let mut held = Vec::new();
    for round in 0..ROUNDS {
        let repo = user.dir.join(format!("r{round}"));
        std::fs::create_dir_all(repo.join(".git"))?;
        std::fs::write(repo.join("omnidev.toml"), "[databases.main]\nengine = \"postgres\"\n")?;
        user.give(&repo)?;
        let started = Instant::now();
        let up = user.omnidev(Vec::new(), &repo, &["up", "--detach"]).output()?;
        ensure!(up.status.success(), "up: {}", String::from_utf8_lossy(&up.stderr));
        took.push(started.elapsed());
        // Idle: what it holds once its start is over.
        std::thread::sleep(Duration::from_secs(2));
        let status = user.omnidev(Vec::new(), &repo, &["status", "--json"]).output()?;
        let status: serde_json::Value = serde_json::from_slice(&status.stdout)?;
        let pid = (status["services"].as_array().context("services")?)
            .iter()
            .find(|s| s["name"] == "main")
            .and_then(|s| s["pid"].as_u64())
            .context("the server's pid")?;
        held.push(tree_pss(u32::try_from(pid)?));
        let stop = user.omnidev(Vec::new(), &repo, &["stop"]).output()?;
        ensure!(stop.status.success(), "stop failed");
    }
    took.sort();
    held.sort_unstable();
    Ok(format!(
        "{:.2} s median to ready of {ROUNDS}; idle {:.1} MiB PSS (server and its workers)",
        took[ROUNDS / 2].as_secs_f64(),
        f64::from(u32::try_from(held[ROUNDS / 2])?) / 1024.0
    ))
}

/// The proportional memory of `pid` and every process below it, in KiB:
/// Postgres's workers share its buffers, which RSS would count once per
/// worker.
fn tree_pss(pid: u32) -> u64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .map(tree_pss)
        .sum::<u64>()
}
