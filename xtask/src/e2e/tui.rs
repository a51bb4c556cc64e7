//! Cases: the TUI in a real terminal (tmux): panes 1/2/3/0 and `q`;
//! suspending with Ctrl-Z or SIGTSTP and `fg`; lines without their newline
//! shown, then finished in place; `omnidev attach` to a detached pod;
//! `P` applying an edited profile.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::control::{omnidev_ok, service_pid, service_state};
use super::{Ctx, SOON, UP};
use crate::util;

/// A private tmux server (its own socket) running one session.
struct Tmux<'c, 'h> {
    ctx: &'c Ctx<'h>,
    socket: String,
}

impl<'c, 'h> Tmux<'c, 'h> {
    /// A tmux server of its own for the case's `name` (its socket named
    /// after it and this process).
    fn new(ctx: &'c Ctx<'h>, name: &str) -> Self {
        Self { ctx, socket: format!("omnidev-e2e-{name}-{}", std::process::id()) }
    }

    /// Types `keys` (tmux key names: `q`, `C-z`, `Enter`) into the session.
    fn send(&self, keys: &[&str]) -> Result<()> {
        self.run(&[&["send-keys", "-t", "pod"][..], keys].concat()).map(drop)
    }

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

    /// A session `pod` of `width` × `height` running `omnidev up` on
    /// `repo`. The pod's processes carry the case's own tag; tmux and its
    /// shell a sub-tag. The shell stays to report how omnidev ended (`$?`,
    /// 128 + signal for a death by signal).
    fn up(&self, repo: &std::path::Path, width: &str, height: &str) -> Result<()> {
        let launch = format!(
            "env OMNIDEV_E2E_TAG='{}' '{}' up --repo '{}'; status=$?; echo \"{ENDED} $status\"; exit $status",
            self.ctx.tag,
            self.ctx.omnidev_path().display(),
            repo.display()
        );
        self.session(&launch, width, height)
    }

    /// A session `pod` of `width` × `height` running `launch`; its pane
    /// stays once it has ended.
    fn session(&self, launch: &str, width: &str, height: &str) -> Result<()> {
        self.run(&[
            "new-session",
            "-d",
            "-s",
            "pod",
            "-x",
            width,
            "-y",
            height,
            launch,
            ";",
            "set-option",
            "-g",
            "remain-on-exit",
            "on",
        ])?;
        Ok(())
    }

    fn screen(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-t", "pod"])
    }

    /// `Some(exit status)` once omnidev has exited, as reported by the
    /// wrapper shell on the screen (the pane stays, `remain-on-exit`).
    /// tmux's own `pane_dead_status` is not used: tmux 3.3a sometimes marks
    /// the pane dead without ever reporting a status, even for `exit 0`.
    fn ended(&self) -> Result<Option<String>> {
        let screen = self.screen()?;
        Ok(screen.lines().find_map(|line| {
            line.trim().strip_prefix(ENDED).map(|status| status.trim().to_string())
        }))
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
            if let Some(status) = self.ended()? {
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
/// What the wrapper shell prints when omnidev has ended, before its status.
const ENDED: &str = "omnidev ended with status";
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
pub fn tui_in_tmux_panes_and_quit(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let tmux = Tmux::new(ctx, "panes");
    tmux.up(&repo, "200", "50")?;

    tmux.wait_screen(
        "the pod to come up (combined pane shows server, host and web)",
        UP,
        |screen| {
            for mark in ["omnigent-host: Connected as", "omnigent-web: ready"] {
                if !screen.contains(mark) {
                    // Best effort, while polling: focus the combined pane.
                    let _ = tmux.send(&["0"]);
                    return Err(format!("waiting for `{mark}`"));
                }
            }
            Ok(())
        },
    )?;
    for (key, mark) in [("1", SERVER), ("2", HOST), ("3", WEB)] {
        tmux.send(&[key])?;
        tmux.wait_screen(&format!("key {key} to show the {mark} pane"), SOON, |screen| {
            only(screen, mark)
        })?;
    }
    tmux.send(&["0"])?;
    tmux.wait_screen("key 0 to show the combined pane", SOON, |screen| {
        if screen.contains(SERVER) && screen.contains(HOST) && screen.contains(WEB) {
            Ok(())
        } else {
            Err("the combined pane lacks one of server/host/web".into())
        }
    })?;
    let processes = ctx.pod_processes().len();
    ensure!(processes >= 4, "only {processes} processes of the pod found while it runs");

    tmux.send(&["q"])?;
    let status =
        util::wait_for("omnidev to quit on `q`", SOON, || tmux.ended()).map_err(|error| {
            anyhow::anyhow!(
                "after q: {error}; processes of the pod:\n{}\nomnidev processes (incl. zombies):\n{}\nlast screen:\n{}",
                super::describe(&ctx.pod_processes()),
                omnidev_threads(&repo, &tmux),
                tmux.screen().unwrap_or_default()
            )
        })?;
    ensure!(status == "0", "omnidev exited with status {status} after q:\n{}", tmux.screen()?);
    ctx.wait_no_pod_process(Duration::from_secs(10)).context("after q")?;
    Ok(())
}

/// Diagnostics for a hang: every process running omnidev on `repo`, with
/// its state and each thread's state and wait channel.
fn omnidev_threads(repo: &std::path::Path, tmux: &Tmux) -> String {
    use std::fmt::Write as _;
    let needle = repo.display().to_string();
    let pane = tmux
        .run(&["display-message", "-p", "-t", "pod", "#{pane_pid} #{pane_tty} #{pane_dead}"])
        .unwrap_or_default();
    let mut report = format!("  pane (pid tty dead): {}", pane.trim());
    let tty = pane.split_whitespace().nth(1).unwrap_or("-").to_string();
    report.push_str("\n  holders of the pane's tty:");
    for pid in omnidev_core::platform::pids() {
        let holds = omnidev_core::platform::open_paths(pid)
            .unwrap_or_default()
            .iter()
            .any(|target| target.to_string_lossy() == tty);
        if holds {
            let _ = write!(report, "\n    {pid}: {}", omnidev_core::platform::cmdline(pid));
        }
    }
    report.push('\n');
    for pid in omnidev_core::platform::pids() {
        let cmdline = omnidev_core::platform::cmdline(pid);
        if !cmdline.contains(" up --repo ")
            || !cmdline.contains(&needle)
            || cmdline.starts_with("env ")
        {
            continue;
        }
        let _ = writeln!(
            report,
            "  pid {pid} {:?}: {cmdline}",
            omnidev_core::platform::stat(pid).map(|s| s.state)
        );
        for thread in omnidev_core::platform::threads(pid).unwrap_or_default() {
            let _ = writeln!(report, "    {thread}");
        }
    }
    report
}

/// A profile of two small services: one ticking, one printing an OSC 8
/// hyperlink in the middle of a line.
const SUSPEND_PROFILE: &str = r#"[services.tick]
command = ["sh", "-c", 'i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 1; done']

[services.link]
command = ["sh", "-c", 'printf "ansi-link: \033]8;;https://example.com/\033\\\\the docs\033]8;;\033\\\\ and the rest\n"; echo link-here; sleep 600']
"#;

/// The link's line as the UI must show it: its text and the rest.
const LINK_SHOWN: &str = "ansi-link: the docs and the rest";

/// Whether the screen shows a line the tick service printed.
fn shows_a_tick(screen: &str) -> bool {
    screen.split("tick ").skip(1).any(|after| after.starts_with(|c: char| c.is_ascii_digit()))
}

/// The whole UI is on screen: the link's line, the link service's other
/// line and a tick.
fn ui(screen: &str) -> Result<(), String> {
    if screen.contains(LINK_SHOWN) && screen.contains("link-here") && shows_a_tick(screen) {
        Ok(())
    } else {
        Err(format!("no `{LINK_SHOWN}` line, `link-here` and a tick"))
    }
}

/// The shell shows its `times`-th `Stopped` job notice and no UI.
fn stopped(times: usize) -> impl Fn(&str) -> Result<(), String> {
    move |screen: &str| {
        let stops = screen.matches("Stopped").count();
        if stops == times && !screen.contains(LINK_SHOWN) {
            Ok(())
        } else {
            Err(format!("{stops} `Stopped` lines (want {times}), or the UI still shown"))
        }
    }
}

/// The pane of one service alone: `link` or `tick`.
fn pane_alone(link: bool) -> impl Fn(&str) -> Result<(), String> {
    move |screen: &str| {
        if screen.contains("link-here") == link && shows_a_tick(screen) != link {
            Ok(())
        } else {
            Err(format!("the {} pane is not shown alone", if link { "link" } else { "tick" }))
        }
    }
}

/// Ctrl-Z and an outside SIGTSTP stop the UI and give the terminal back
/// to the shell; `fg` brings it back redrawn, and keys act without Enter.
/// The OSC 8 link keeps its text and the rest of its line.
pub fn tui_ctrl_z_and_sigtstp_suspend_fg_restores(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.dir.join("suspend");
    std::fs::create_dir_all(&repo)?;
    std::fs::write(repo.join("omnidev.toml"), SUSPEND_PROFILE)?;
    // An interactive shell, for job control (Ctrl-Z, `fg`).
    let tmux = Tmux::new(ctx, "suspend");
    tmux.session("bash --norc --noprofile -i", "160", "40")?;
    let omnidev = ctx.omnidev_path().display().to_string();
    tmux.send(&[
        &format!("env OMNIDEV_E2E_TAG='{}' '{omnidev}' up --repo '{}'", ctx.tag, repo.display()),
        "Enter",
    ])?;
    tmux.wait_screen("the UI with both services' lines", UP, ui)?;

    tmux.send(&["C-z"])?;
    tmux.wait_screen("Ctrl-Z to stop omnidev and show the shell", SOON, stopped(1))?;
    tmux.send(&["fg", "Enter"])?;
    tmux.wait_screen("fg to redraw the UI", SOON, ui)?;
    tmux.send(&["2"])?;
    tmux.wait_screen("key 2 (no Enter) to show the link pane", SOON, pane_alone(true))?;

    let omnidev_pid = ctx
        .pod_processes()
        .into_iter()
        .find(|(_, cmdline)| cmdline.starts_with(&omnidev) && cmdline.contains(" up --repo "))
        .map(|(pid, _)| pid)
        .context("omnidev's own process not found")?;
    super::send_signal(omnidev_pid, "TSTP")?;
    tmux.wait_screen("SIGTSTP to stop omnidev and show the shell", SOON, stopped(2))?;
    tmux.send(&["fg", "Enter"])?;
    tmux.wait_screen("fg to redraw the link pane", SOON, |screen| {
        if screen.contains(LINK_SHOWN) && screen.contains("link-here") {
            Ok(())
        } else {
            Err("the link pane is not redrawn".into())
        }
    })?;
    tmux.send(&["1"])?;
    tmux.wait_screen("key 1 (no Enter) to show the tick pane", SOON, pane_alone(false))?;

    tmux.send(&["q"])?;
    ctx.wait_no_pod_process(SOON).context("after q")?;
    tmux.send(&[&format!("echo \"{ENDED} $?\""), "Enter"])?;
    let status = util::wait_for("the shell to report omnidev's exit", SOON, || tmux.ended())?;
    ensure!(status == "0", "omnidev exited with {status}:\n{}", tmux.screen()?);
    Ok(())
}

/// A prompt that waits for a file, and a progress bar redrawn with `\r`
/// that waits for another before its last redraw and its newline.
const UNFINISHED_PROFILE: &str = r#"[services.prompt]
command = ["sh", "-c", "printf 'Password: '; while [ ! -e answer ]; do sleep 0.1; done; echo secret; exec sleep 600"]

[services.bar]
command = ["sh", "-c", "printf 'at 10%%'; sleep 0.3; printf '\rat 50%%'; while [ ! -e done ]; do sleep 0.1; done; printf '\rat 100%%\n'; exec sleep 600"]
"#;

/// Lines of `screen` containing `text`.
fn rows_with(screen: &str, text: &str) -> usize {
    screen.lines().filter(|row| row.contains(text)).count()
}

/// Lines without their newline in a real terminal: the prompt is shown
/// while the service waits (its newline cannot come before the case writes
/// the answer), then finished in place, one line; the progress bar is
/// redrawn in place (`at 50%` replaces `at 10%`) and ends as `at 100%`
/// alone.
pub fn tui_shows_unfinished_lines_and_finishes_them_in_place(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.dir.join("unfinished");
    std::fs::create_dir_all(&repo)?;
    std::fs::write(repo.join("omnidev.toml"), UNFINISHED_PROFILE)?;
    let tmux = Tmux::new(ctx, "unfinished");
    tmux.up(&repo, "160", "40")?;
    tmux.wait_screen("the prompt and the redrawn bar before their newlines", UP, |screen| {
        // (tmux leaves out the spaces that end a row.)
        if rows_with(screen, "Password:") != 1 || screen.contains("secret") {
            return Err("no one `Password:` line (without `secret`)".into());
        }
        if rows_with(screen, "at 50%") != 1 || screen.contains("at 10%") {
            return Err("the bar is not one `at 50%` line".into());
        }
        Ok(())
    })?;
    std::fs::write(repo.join("answer"), "")?;
    std::fs::write(repo.join("done"), "")?;
    tmux.wait_screen("both finished in place", SOON, |screen| {
        if rows_with(screen, "Password:") != 1 || rows_with(screen, "Password: secret") != 1 {
            return Err("not one `Password: secret` line".into());
        }
        if rows_with(screen, "at ") != 1 || rows_with(screen, "at 100%") != 1 {
            return Err("not one `at 100%` line".into());
        }
        Ok(())
    })?;
    tmux.send(&["q"])?;
    ctx.wait_no_pod_process(SOON).context("after q")?;
    drop(tmux);
    // The log files have the finished lines alone.
    let repo = repo.display().to_string();
    for (service, want) in [("prompt", "Password: secret"), ("bar", "at 100%")] {
        let (status, text) = ctx.run_omnidev(&["logs", "--repo", &repo, service], SOON)?;
        ensure!(
            status.success() && text.trim_end() == want,
            "omnidev logs {service}: {status}, {text:?} (want {want:?})"
        );
    }
    Ok(())
}

/// `omnidev status --json` of the pod of `repo` (with only a shared
/// borrow of the case, beside a [`Tmux`]).
fn status_json(ctx: &Ctx, repo: &std::path::Path) -> Result<String> {
    let output = ctx.omnidev().args(["status", "--json", "--repo"]).arg(repo).output()?;
    ensure!(
        output.status.success(),
        "status --json failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `up --detach`; `up` on the running pod names `attach` and `stop`;
/// `omnidev attach` in tmux shows the server's lines and the attached
/// footer, `r` on the server pane restarts it (a new pid in `status
/// --json`), `q` leaves with exit 0 and the pod still running with that
/// server; then `stop`.
pub fn attach_tui_shows_the_server_restarts_it_and_detaches(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP)?;
    let status = status_json(ctx, &repo)?;
    let before = service_pid(&status, "server")?.context("server pid")?;

    let repo_arg = repo.to_str().context("non-UTF-8 checkout path")?;
    let (code, out) = ctx.run_omnidev(&["up", "--repo", repo_arg], SOON)?;
    ensure!(
        code.code() == Some(1)
            && out.contains("is already running")
            && out.contains("omnidev attach --repo")
            && out.contains("omnidev stop --repo"),
        "`up` on a running pod must exit 1 naming attach and stop ({code}):\n{out}"
    );

    // The shell stays after omnidev (killed with the tmux server): a dead
    // pane loses the line printed after the UI left the alternate screen.
    let launch = format!(
        "env OMNIDEV_E2E_TAG='{}' '{}' attach --repo '{}'; status=$?; echo \"{ENDED} $status\"; sleep 600",
        ctx.tag,
        ctx.omnidev_path().display(),
        repo.display()
    );
    let tmux = Tmux::new(ctx, "attach");
    tmux.session(&launch, "200", "50")?;
    tmux.wait_screen(
        "attach to show the server's kept lines and the attached footer",
        SOON,
        |screen| {
            if !screen.contains(SERVER) {
                return Err(format!("no `{SERVER}` line"));
            }
            if !screen.contains("q detach") || !screen.contains("pod keeps running") {
                return Err("no attached footer".into());
            }
            if !screen.contains("1 server ready pid") {
                return Err("no server tab with its state".into());
            }
            Ok(())
        },
    )?;
    tmux.send(&["1"])?;
    tmux.wait_screen("key 1 to show the server pane", SOON, |screen| only(screen, SERVER))?;
    tmux.send(&["r"])?;
    let after = util::wait_for("`r` to give the server a new pid", UP, || {
        let status = status_json(ctx, &repo)?;
        let pid = service_pid(&status, "server")?;
        let state = service_state(&status, "server")?;
        Ok(pid.filter(|pid| *pid != before && state == "ready"))
    })?;
    tmux.wait_screen("the footer to say the restart is done", SOON, |screen| {
        if screen.contains("restarted server") {
            Ok(())
        } else {
            Err("no `restarted server`".into())
        }
    })?;
    tmux.wait_screen("the server pane to show the new run", SOON, |screen| {
        if screen.contains(&format!("server started (pid {after})")) {
            Ok(())
        } else {
            Err(format!("no `server started (pid {after})`"))
        }
    })?;

    tmux.send(&["q"])?;
    let code = util::wait_for("attach to leave on `q`", SOON, || tmux.ended())?;
    let screen = tmux.screen()?;
    ensure!(code == "0", "attach exited {code} after q:\n{screen}");
    ensure!(
        screen.contains("detached; the pod keeps running"),
        "attach did not say the pod keeps running:\n{screen}"
    );
    let status = status_json(ctx, &repo)?;
    ensure!(status.contains("\"running\": true"), "the pod stopped with the UI:\n{status}");
    ensure!(
        service_pid(&status, "server")? == Some(after),
        "the server was touched by q:\n{status}"
    );
    drop(tmux);
    omnidev_ok(ctx, &repo, &["stop"], SOON)?;
    ctx.wait_no_pod_process(SOON).context("after stop")?;
    Ok(())
}

/// Two services: `tick` prints `WORD N` each second, `other` sleeps.
fn reload_profile(word: &str) -> String {
    format!(
        r#"[services.tick]
command = ["sh", "-c", 'i=0; while true; do i=$((i+1)); echo "{word} $i"; sleep 1; done']

[services.other]
command = ["sh", "-c", 'echo other-up; exec sleep 600']
"#
    )
}

/// An edit of the profile under the TUI: one notice naming the service
/// and `P`, the footer offering `P`; `P` restarts that service alone.
pub fn tui_p_applies_an_edited_profile(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.dir.join("reload-profile");
    std::fs::create_dir_all(&repo)?;
    let file = repo.join("omnidev.toml");
    std::fs::write(&file, reload_profile("tick"))?;
    let tmux = Tmux::new(ctx, "reload-profile");
    tmux.up(&repo, "200", "40")?;
    tmux.wait_screen("both services up", UP, |screen| {
        if screen.contains("other-up") && screen.contains("tick 1") {
            Ok(())
        } else {
            Err("no `other-up` and `tick 1`".into())
        }
    })?;
    // `other`'s pid, from `omnidev status --json`.
    let other = || -> Result<u32> {
        let status = status_json(ctx, &repo)?;
        service_pid(&status, "other")?.with_context(|| format!("no pid of other in {status}"))
    };
    let before = other()?;

    std::fs::write(&file, reload_profile("tock"))?;
    tmux.wait_screen("the notice and the footer's P", SOON, |screen| {
        let notice = "omnidev.toml changed: tick (command); press P or run `omnidev reload-profile` to apply";
        if !screen.contains(notice) {
            return Err(format!("no `{notice}`"));
        }
        if !screen.contains("P apply profile (tick)") {
            return Err("the footer does not offer P".into());
        }
        Ok(())
    })?;
    tmux.send(&["P"])?;
    let screen = tmux.wait_screen("P to restart tick with its new command", SOON, |screen| {
        if screen.contains("applied omnidev.toml: restarted tick") && screen.contains("tock 1") {
            Ok(())
        } else {
            Err("no `applied omnidev.toml: restarted tick` and `tock 1`".into())
        }
    })?;
    ensure!(other()? == before, "other was restarted too:\n{screen}");
    ensure!(
        !screen.contains("P apply profile"),
        "the footer still offers P after applying:\n{screen}"
    );
    tmux.send(&["q"])?;
    let status = util::wait_for("omnidev to quit on `q`", SOON, || tmux.ended())?;
    ensure!(status == "0", "omnidev exited with {status}");
    ctx.wait_no_pod_process(Duration::from_secs(10)).context("after q")?;
    Ok(())
}
