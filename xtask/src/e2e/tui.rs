//! Case: the TUI in a real terminal (tmux): panes 1/2/3/0 and `q`.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::{Ctx, SOON, UP};
use crate::util;

/// A private tmux server (its own socket) running one session.
struct Tmux<'c, 'h> {
    ctx: &'c Ctx<'h>,
    socket: String,
}

impl Tmux<'_, '_> {
    fn command(&self) -> Command {
        let mut command = self.ctx.command_with_subtag("tmux", "tmux");
        command.args(["-L", &self.socket, "-f", "/dev/null"]);
        command
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let output = self.command().args(args).output()?;
        if !output.status.success() {
            bail!(
                "tmux {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn screen(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-t", "pod"])
    }

    /// `Some(exit status)` once omnidev (the pane's program) has exited; the
    /// pane stays around (`remain-on-exit`) so that its status can be read.
    fn dead(&self) -> Result<Option<String>> {
        let state = self.run(&[
            "display-message",
            "-p",
            "-t",
            "pod",
            "#{pane_dead} #{pane_dead_status}",
        ])?;
        Ok(state.trim().strip_prefix("1 ").map(str::to_string))
    }

    /// Wait until the screen satisfies `check`, which explains what is wrong
    /// when it does not.
    fn wait_screen(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<String> {
        let mut last = String::new();
        util::wait_for(what, timeout, || {
            if let Some(status) = self.dead()? {
                bail!("omnidev exited (status {status}); last screen:\n{last}");
            }
            let screen = self.screen()?;
            let verdict = check(&screen);
            last = screen;
            Ok(verdict.ok().map(|()| last.clone()))
        })
        .map_err(|error| {
            let why = check(&last).err().unwrap_or_default();
            anyhow::anyhow!("{error} ({why}); last screen:\n{last}")
        })
    }
}

impl Drop for Tmux<'_, '_> {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

const SERVER: &str = "omnigent-server:";
const HOST: &str = "omnigent-host:";
const WEB: &str = "omnigent-web:";

/// Demand that the body shows `want` and none of the other services' marks.
fn only(screen: &str, want: &str) -> Result<(), String> {
    if !screen.contains(want) {
        return Err(format!("no `{want}` line on screen"));
    }
    for other in [SERVER, HOST, WEB] {
        if other != want && screen.contains(other) {
            return Err(format!("`{other}` shown in the `{want}` pane"));
        }
    }
    Ok(())
}

/// Run `omnidev up` in tmux, switch panes with 1/2/3/0, quit with `q`.
pub fn panes_and_quit(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let tmux = Tmux {
        ctx,
        socket: format!("omnidev-e2e-{}", std::process::id()),
    };
    // The pod's processes carry the case's own tag; tmux and its shell a sub-tag.
    let launch = format!(
        "env OMNIDEV_E2E_TAG='{}' '{}' up --repo '{}'",
        ctx.tag,
        ctx.omnidev_path().display(),
        repo.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "pod",
        "-x",
        "200",
        "-y",
        "50",
        &launch,
        ";",
        "set-option",
        "-g",
        "remain-on-exit",
        "on",
    ])?;

    tmux.wait_screen(
        "the pod to come up (combined pane shows server, host and web)",
        UP,
        |screen| {
            for mark in ["omnigent-host: connected to server", "omnigent-web: ready"] {
                if !screen.contains(mark) {
                    tmux_send(&tmux, "0");
                    return Err(format!("waiting for `{mark}`"));
                }
            }
            Ok(())
        },
    )?;
    for (key, mark) in [("1", SERVER), ("2", HOST), ("3", WEB)] {
        tmux.run(&["send-keys", "-t", "pod", key])?;
        tmux.wait_screen(
            &format!("key {key} to show the {mark} pane"),
            SOON,
            |screen| only(screen, mark),
        )?;
    }
    tmux.run(&["send-keys", "-t", "pod", "0"])?;
    tmux.wait_screen("key 0 to show the combined pane", SOON, |screen| {
        if screen.contains(SERVER) && screen.contains(HOST) && screen.contains(WEB) {
            Ok(())
        } else {
            Err("the combined pane lacks one of server/host/web".into())
        }
    })?;
    let processes = ctx.pod_processes().len();
    ensure!(
        processes >= 4,
        "only {processes} processes of the pod found while it runs"
    );

    tmux.run(&["send-keys", "-t", "pod", "q"])?;
    let status =
        util::wait_for("omnidev to quit on `q`", SOON, || tmux.dead()).context("after q")?;
    ensure!(
        status == "0",
        "omnidev exited with status {status} after q:\n{}",
        tmux.screen()?
    );
    ctx.wait_no_pod_process(Duration::from_secs(10))
        .context("after q")?;
    Ok(())
}

/// Best-effort key press used while polling (focus the combined pane).
fn tmux_send(tmux: &Tmux, key: &str) {
    let _ = tmux.run(&["send-keys", "-t", "pod", key]);
}
