//! `omnidev mcp` as a client nobody here wrote meets it: the MCP
//! Inspector's CLI, installed from npm, on a detached pod of the example.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::control::omnidev_ok;
use super::{Ctx, SOON, UP};
use crate::util;

/// The Inspector release the case runs (a fixed one: its output is what
/// the case reads).
const INSPECTOR: &str = "@modelcontextprotocol/inspector@2.12.0";

/// A first run downloads the Inspector.
const INSPECTOR_TIMEOUT: Duration = Duration::from_mins(5);

/// Runs the Inspector's CLI against `omnidev mcp --repo REPO` with `args`
/// (`--method …`); the JSON it prints.
fn inspector(ctx: &mut Ctx, repo: &Path, label: &str, args: &[&str]) -> Result<Value> {
    let out = ctx.output_file(&format!("inspector-{label}"));
    let err = ctx.output_file(&format!("inspector-{label}-stderr"));
    let mut command = ctx.command("npx");
    command
        .args(["-y", INSPECTOR, "--cli"])
        .arg(ctx.omnidev_path())
        .args(["mcp", "--repo"])
        .arg(repo)
        .args(args)
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?);
    let mut child = command.spawn().context("running npx (npm's)")?;
    let status = util::wait_for(&format!("the Inspector's {label}"), INSPECTOR_TIMEOUT, || {
        Ok(child.try_wait()?)
    })
    .inspect_err(|_| {
        let _ = child.kill();
        let _ = child.wait();
    })?;
    let text = std::fs::read_to_string(&out)?;
    ensure!(
        status.success(),
        "the Inspector's {label} failed ({status}):\n{text}\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    serde_json::from_str(&text).with_context(|| format!("the Inspector's {label} printed:\n{text}"))
}

/// The structured result of a tool call the Inspector made, which must
/// have succeeded.
fn tool(ctx: &mut Ctx, repo: &Path, name: &str, args: &[&str]) -> Result<Value> {
    let mut all = vec!["--method", "tools/call", "--tool-name", name];
    for arg in args {
        all.extend(["--tool-arg", arg]);
    }
    let answer = inspector(ctx, repo, name, &all)?;
    ensure!(answer["isError"] == false, "{name}: {answer:#}");
    Ok(answer["structuredContent"].clone())
}

/// The Inspector lists the tools (each input schema one it reads) and
/// calls `status`, `logs` with a number of lines, `restart` and `wait`
/// on a detached pod of the example; each answer is what the tool
/// promises.
pub fn inspector_cli_lists_and_calls_the_tools(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP)?;

    let listed = inspector(ctx, &repo, "tools-list", &["--method", "tools/list"])?;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .context("no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in ["status", "logs", "restart", "wait", "events"] {
        ensure!(names.contains(&name), "no `{name}` in {names:?}");
    }

    let status = tool(ctx, &repo, "status", &[])?;
    ensure!(status["running"] == true, "status: {status:#}");
    let server = |status: &Value| -> Option<i64> {
        status["services"].as_array()?.iter().find(|s| s["name"] == "server")?["pid"].as_i64()
    };
    let before = server(&status).context("the server has no pid")?;

    let logs = tool(ctx, &repo, "logs", &["service=server", "lines=3"])?;
    let lines = logs["lines"].as_array().map_or(0, Vec::len);
    ensure!(lines == 3, "logs lines=3 gave {lines}: {logs:#}");

    tool(ctx, &repo, "restart", &["service=server"])?;
    let waited = tool(ctx, &repo, "wait", &["until=ready"])?;
    ensure!(waited["ok"] == true, "wait: {waited:#}");
    let after = server(&waited["status"]).context("the server has no pid")?;
    ensure!(after != before, "restart kept the server's pid {before}");

    omnidev_ok(ctx, &repo, &["stop"], SOON)?;
    ctx.wait_no_pod_process(Duration::from_secs(5))
}
