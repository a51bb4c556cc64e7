//! `omnidev ls [--json]`: every pod under the cache root, with its
//! checkout, ports and whether it runs.

use std::process::ExitCode;

use crate::cli::LsArgs;
use crate::control::{self, PodList};
use crate::output::{json, write_stdout};
use omnidev_core::text::{quote, quote_path};

/// Runs `omnidev ls`.
pub fn run(args: &LsArgs) -> miette::Result<ExitCode> {
    let cache_root = omnidev_pod::pod::cache_root().map_err(crate::error::Error::Pod)?;
    let mut list = control::list_pods(&cache_root)?;
    // What each running pod holds, asked of it now; and the sum.
    let mut total = omnidev_core::platform::Usage::default();
    for pod in list.pods.iter_mut().filter(|pod| pod.running) {
        if let Ok(status) = control::inspect(&pod.pod_dir) {
            pod.usage = status.usage;
            if status.host.is_some() {
                // This side holds no record of a pod of another host: what
                // it answered stands.
                pod.repo = pod.repo.take().or(status.repo);
                if pod.ports.is_empty() {
                    pod.ports = status.ports;
                }
                pod.host = status.host;
            }
            pod.started_at = status.started_at;
            pod.last_activity = status.last_activity;
        }
        total.add(pod.usage.unwrap_or_default());
    }
    list.usage = Some(total);
    let text = if args.json { json(&list)? } else { render(&list) };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The human form: one pod per line.
pub fn render(list: &PodList) -> String {
    use std::fmt::Write as _;
    if list.pods.is_empty() {
        return format!("no pods under {}\n", quote_path(&list.cache_root));
    }
    let header = ["POD", "STATE", "UP", "ACTIVE", "USES", "PORTS", "REPO"].map(str::to_owned);
    let now = std::time::SystemTime::now();
    // How long ago an RFC 3339 time of the pod's was: `45s`, `12m`, `3h`.
    let ago = |at: &Option<String>| {
        (at.as_deref()).and_then(omnidev_core::event::rfc3339::parse).map_or_else(
            || "-".to_owned(),
            |at| crate::output::ago(now.duration_since(at).unwrap_or_default()),
        )
    };
    let rows = list.pods.iter().map(|pod| {
        let name = pod
            .pod_dir
            .file_name()
            .map_or_else(|| quote_path(&pod.pod_dir), |n| quote_path(std::path::Path::new(n)));
        let state = match (pod.running, pod.pid) {
            (true, _) if let Some(host) = &pod.host => format!("running on {}", quote(host)),
            (true, Some(pid)) => format!("running pid {pid}"),
            (true, None) => "running".to_owned(),
            (false, _) => "stopped".to_owned(),
        };
        let repo = match (&pod.error, &pod.repo) {
            (Some(error), _) => format!("error: {}", quote(error)),
            (None, Some(repo)) if pod.repo_gone => format!("{} (gone)", quote_path(repo)),
            (None, Some(repo)) => quote_path(repo),
            (None, None) => "?".to_owned(),
        };
        let uses =
            pod.usage.map_or_else(|| "-".to_owned(), |u| omnidev_core::platform::mib(u.rss_bytes));
        let (up, active) = (ago(&pod.started_at), ago(&pod.last_activity));
        let ports = crate::output::ports(&pod.ports);
        [name, state, up, active, uses, ports, repo]
    });
    let rows: Vec<[String; 7]> = std::iter::once(header).chain(rows).collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (w0, w1, w2, w3, w4, w5) = (width(0), width(1), width(2), width(3), width(4), width(5));
    let mut out = String::new();
    for [name, state, up, active, uses, ports, repo] in &rows {
        let _ = writeln!(
            out,
            "{name:<w0$}  {state:<w1$}  {up:>w2$}  {active:>w3$}  {uses:>w4$}  {ports:<w5$}  {repo}"
        );
    }
    let running = list.pods.iter().filter(|pod| pod.running).count();
    if let Some(total) = list.usage.filter(|_| running > 0) {
        let _ = writeln!(out, "{running} running: {}", crate::output::usage(&total));
    }
    let gone: Vec<_> = list.pods.iter().filter(|pod| pod.repo_gone && !pod.running).collect();
    if let Some(first) = gone.first() {
        let _ = writeln!(
            out,
            "{} stopped pod{} whose checkout is gone keep ports: `omnidev gc` removes them all \
             (`omnidev gc --dry-run` lists them), `omnidev clean --pod-dir {}` this one",
            gone.len(),
            if gone.len() == 1 { "" } else { "s" },
            quote_path(&first.pod_dir)
        );
    }
    out
}
