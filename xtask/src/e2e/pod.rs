//! Cases: the example pod comes up headless; two checkouts at once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::{Ctx, SOON, Server, UP, install_count, parse};
use crate::util;

/// What the example server reports about its environment at `/env`.
struct EnvReport {
    data_dir: String,
    database_uri: String,
    database: String,
    config_home: String,
    url: String,
    log_tty_fd: String,
}

fn env_report(server: Server) -> Result<EnvReport> {
    let (status, body) = util::http_get(server.port, "/env")?;
    ensure!(status == 200, "GET /env answered {status}: {body}");
    let field = |key: &str| {
        util::json_field(&body, key).with_context(|| format!("no {key} in /env: {body}"))
    };
    Ok(EnvReport {
        data_dir: field("OMNIGENT_DATA_DIR")?,
        database_uri: field("OMNIGENT_DATABASE_URI")?,
        database: field("database")?,
        config_home: field("OMNIGENT_CONFIG_HOME")?,
        url: field("OMNIGENT_URL")?,
        log_tty_fd: field("OMNIGENT_LOG_TTY_FD")?,
    })
}

/// The pod directory, derived from `OMNIGENT_DATA_DIR` (`<pod>/data/omnigent`).
fn pod_dir(report: &EnvReport) -> Result<PathBuf> {
    Path::new(&report.data_dir).parent().and_then(Path::parent).map(Path::to_path_buf).with_context(
        || format!("OMNIGENT_DATA_DIR {} is not <pod>/data/omnigent", report.data_dir),
    )
}

/// Check the pod environment (data dir, ports, URLs) as the server saw it.
fn check_env_contract(ctx: &Ctx, server: Server, report: &EnvReport) -> Result<PathBuf> {
    let pod = pod_dir(report)?;
    let pods_root = ctx.cache_home().join("omnidev");
    ensure!(
        pod.starts_with(&pods_root),
        "pod dir {} is not under {}",
        pod.display(),
        pods_root.display()
    );
    ensure!(report.data_dir.ends_with("/data/omnigent"), "OMNIGENT_DATA_DIR = {}", report.data_dir);
    let expected_uri = format!("sqlite:///{}/chat.db", report.data_dir);
    ensure!(
        report.database_uri == expected_uri,
        "OMNIGENT_DATABASE_URI = {} (expected {expected_uri})",
        report.database_uri
    );
    ensure!(
        report.database == format!("{}/chat.db", report.data_dir),
        "the server opened {} rather than the pod's database",
        report.database
    );
    ensure!(Path::new(&report.database).is_file(), "database {} was not created", report.database);
    ensure!(
        report.config_home == pod.join("config").display().to_string(),
        "OMNIGENT_CONFIG_HOME = {}",
        report.config_home
    );
    let url = format!("http://127.0.0.1:{}", server.port);
    ensure!(report.url == url, "OMNIGENT_URL = {} (expected {url})", report.url);
    ensure!(report.log_tty_fd == "2", "OMNIGENT_LOG_TTY_FD = {}", report.log_tty_fd);
    Ok(pod)
}

/// The example pod comes up headless: all three services reach `ready`
/// (server by HTTP, host by its log line, vite by its port), host started
/// only once the server was ready, vite serving (and proxying to the
/// server), dependencies installed once; SIGINT then leaves no process.
pub fn up_headless_server_host_vite(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &[])?;
    let (server, vite) = pod.ready(UP)?;
    // The embedded profile has a readiness check for every service: the
    // server by HTTP, the host by its `Connected as` line, vite by its port.
    for service in ["server", "host", "vite"] {
        let line = format!("omnidev | {service} ready");
        pod.wait_output(&format!("`{line}`"), UP, |out| {
            out.lines().any(|l| l == line).then_some(())
        })?;
    }
    let out = pod.output();

    let hosts = parse::host_starts(&out);
    let first_host = hosts.first().context("no `omnigent-host: started` line")?;
    ensure!(first_host.server_was_ready, "the host started before the server was ready:\n{out}");
    let listening = parse::listening_line(&out, server.pid).context("no listening line")?;
    ensure!(
        first_host.line > listening,
        "the host's start line precedes the server's listening line"
    );

    let (status, page) = util::http_get(vite, "/")?;
    ensure!(
        status == 200 && page.contains("omnigent example UI"),
        "GET / on vite: {status} {page}"
    );
    let (status, body) = util::http_get(vite, "/api/health")?;
    ensure!(
        status == 200 && body.contains(&format!("\"pid\": {}", server.pid)),
        "vite's proxy to OMNIGENT_URL: {status} {body}"
    );

    let report = env_report(server)?;
    let pod_dir = check_env_contract(ctx, server, &report)?;
    ensure!(
        install_count(&repo) == 1,
        "the dependency install ran {} times on first start",
        install_count(&repo)
    );
    ensure!(
        out.contains(&format!("localhost:{vite}"))
            && out.contains(&format!("localhost:{}", server.port)),
        "omnidev did not print the ui/server URLs (localhost:{vite}, localhost:{})",
        server.port
    );
    ctx.note(format!("server :{} vite :{vite} pod {}", server.port, pod_dir.display()));

    pod.stop_with("INT", ctx)?;
    ensure!(!util::port_open(server.port), "port {} still open after shutdown", server.port);
    ensure!(!util::port_open(vite), "port {vite} still open after shutdown");
    Ok(())
}

/// Two checkouts run at once with four distinct ports and separate
/// databases; a second omnidev in the same checkout is refused.
pub fn two_checkouts_at_once_second_omnidev_refused(ctx: &mut Ctx) -> Result<()> {
    let repo_a = ctx.checkout("a")?;
    let repo_b = ctx.checkout("b")?;
    let mut pod_a = ctx.up(&repo_a, &[])?;
    let mut pod_b = ctx.up(&repo_b, &[])?;
    let (server_a, vite_a) = pod_a.ready(UP)?;
    let (server_b, vite_b) = pod_b.ready(UP)?;

    let ports: BTreeSet<u16> = [server_a.port, vite_a, server_b.port, vite_b].into();
    ensure!(
        ports.len() == 4,
        "ports collide: a server {} vite {vite_a}, b server {} vite {vite_b}",
        server_a.port,
        server_b.port
    );
    let report_a = env_report(server_a)?;
    let report_b = env_report(server_b)?;
    let pod_dir_a = check_env_contract(ctx, server_a, &report_a)?;
    check_env_contract(ctx, server_b, &report_b)?;
    ensure!(report_a.database != report_b.database, "both pods use {}", report_a.database);

    // A second omnidev for checkout a must be refused at once.
    let a = repo_a.display().to_string();
    let (status, out) = ctx.run_omnidev(&["up", "--headless", "--repo", &a], SOON)?;
    ensure!(!status.success(), "a second omnidev in the same checkout was not refused:\n{out}");
    let flat: String = out.chars().filter(|c| !c.is_whitespace() && *c != '│').collect();
    let pod_dir: String = pod_dir_a.display().to_string();
    ensure!(
        flat.contains(&pod_dir),
        "the refusal does not name the pod directory {pod_dir}:\n{out}"
    );
    ensure!(
        out.contains(&pod_a.pid().to_string()),
        "the refusal does not name the running omnidev's pid {}:\n{out}",
        pod_a.pid()
    );
    let still = pod_a.server(None, SOON)?;
    if still.pid != server_a.pid {
        bail!(
            "the refused omnidev disturbed the running pod (server pid {} -> {})",
            server_a.pid,
            still.pid
        );
    }
    ctx.note(format!("ports {ports:?}"));

    pod_a.signal("INT")?;
    pod_b.signal("INT")?;
    pod_a.wait_exit(SOON)?;
    pod_b.wait_exit(SOON)?;
    ctx.wait_no_pod_process(Duration::from_secs(10))?;
    Ok(())
}
