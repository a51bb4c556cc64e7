//! A service's prepare steps (e.g. `npm install` when the lockfile is
//! newer than `node_modules`), run in order before its process starts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::spawn::{ProcessGroup, Spawner};
use crate::event::{EventKind, Stream};
use crate::history::{Cursor, Kept};
use crate::logs::LogStore;
use crate::spec::{PrepareStep, PrepareWhen};
use crate::sync::Locked;

/// The group of the step running now, so that stopping the service can kill
/// it outright (a prepare step is not a service: no stop signal, no grace),
/// and whether the service's steps run in the background
/// ([`crate::spec::ServiceSpec::yields`]), which each step's group is put
/// in as it starts and whenever the engine says so.
#[derive(Debug)]
pub(super) struct StepSlot(Mutex<Slot>);

#[derive(Debug)]
struct Slot {
    group: Option<Arc<dyn ProcessGroup>>,
    background: bool,
}

impl StepSlot {
    /// An empty slot whose steps start in the background when `background`.
    pub(super) fn new(background: bool) -> Self {
        Self(Mutex::new(Slot { group: None, background }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.0.locked()
    }

    fn set(&self, group: Option<Arc<dyn ProcessGroup>>) {
        let mut slot = self.lock();
        if slot.background
            && let Some(group) = &group
        {
            group.set_background(true);
        }
        slot.group = group;
    }

    /// The running step's group, taken out of the slot.
    pub(super) fn take(&self) -> Option<Arc<dyn ProcessGroup>> {
        self.lock().group.take()
    }

    /// Puts the running step and the ones after it in the background, or
    /// back in the foreground.
    pub(super) fn set_background(&self, on: bool) {
        let mut slot = self.lock();
        slot.background = on;
        if let Some(group) = &slot.group {
            group.set_background(on);
        }
    }
}

/// What the steps run with.
pub(super) struct Prepare<'a> {
    pub(super) service: &'a str,
    pub(super) steps: &'a [PrepareStep],
    pub(super) spawner: &'a dyn Spawner,
    pub(super) logs: &'a LogStore,
    pub(super) slot: &'a StepSlot,
    /// Run every step, stale or not (the previous attempt failed: a failed
    /// install may have left its target looking fresh).
    pub(super) force: bool,
}

/// How many of a failed step's last output lines its report quotes.
const REPORT_LINES: usize = 8;

/// A prepare step that failed, with what its report needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    step: String,
    command: String,
    cwd: PathBuf,
    /// `exit code 1`, or why it could not be started.
    outcome: String,
    last_lines: Vec<String>,
    /// The files whose change makes the engine try again.
    pub(super) inputs: Vec<PathBuf>,
}

impl Failure {
    /// The report shown once: the command, how it ended, its last lines.
    pub(super) fn report(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "`{}` in {} failed ({}){}",
            self.command,
            self.cwd.display(),
            self.outcome,
            if self.last_lines.is_empty() { "; it printed nothing" } else { "; its last lines:" }
        )];
        lines.extend(self.last_lines.iter().map(|line| format!("  {line}")));
        lines
    }

    /// One line for the service's state: what failed and what to do.
    pub(super) fn reason(&self, service: &str) -> String {
        let retry = if self.inputs.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = self
                .inputs
                .iter()
                .map(|p| p.strip_prefix(&self.cwd).unwrap_or(p).display().to_string())
                .collect();
            format!("it tries again when {} changes, ", names.join(", "))
        };
        format!(
            "{} failed ({}); {service} was not started. Fix the cause: {retry}or restart {service} \
             (`r` in the TUI, `omnidev restart {service}`)",
            self.step, self.outcome
        )
    }
}

/// Runs the steps that are needed, in order; output goes to the service's
/// log, with a heartbeat line while a step is silent. The first failed step
/// ends the run: the steps after it, and the service, do not run.
pub(super) async fn run(prepare: Prepare<'_>, emit: impl Fn(EventKind)) -> Result<(), Failure> {
    let Prepare { service, steps, spawner, logs, slot, force } = prepare;
    for step in steps {
        if !force && !needed(&step.when) {
            continue;
        }
        // Where the step's own output begins.
        let mut output = logs.history().tail();
        emit(EventKind::PrepareStarted { step: step.name.clone() });
        let outcome = match spawner.spawn_step(&step.command, service) {
            Ok(spawned) => {
                slot.set(Some(spawned.group.clone()));
                let mut exit = spawned.exit;
                let started = Instant::now();
                let mut seen = logs.line_count(service);
                let heartbeat = step.heartbeat.max(Duration::from_millis(100));
                let status = loop {
                    tokio::select! {
                        status = &mut exit => break status,
                        () = tokio::time::sleep(heartbeat) => {
                            let now = logs.line_count(service);
                            if now == seen {
                                let text = format!(
                                    "{} still running ({} s)",
                                    step.name,
                                    started.elapsed().as_secs()
                                );
                                logs.push_batch(service, Stream::Supervisor, &mut vec![text], &[]);
                            }
                            seen = logs.line_count(service);
                        }
                    }
                };
                // Leftovers of the step must not outlive it.
                spawned.group.stop(libc::SIGKILL, Duration::ZERO).await;
                spawned.group.release();
                slot.set(None);
                if status.success() { Ok(()) } else { Err(status.to_string()) }
            }
            Err(e) => Err(format!("could not start it: {e}")),
        };
        let success = outcome.is_ok();
        if success {
            mark_fresh(&step.when);
        }
        emit(EventKind::PrepareFinished { step: step.name.clone(), success });
        if let Err(outcome) = outcome {
            return Err(Failure {
                step: step.name.clone(),
                command: shown_command(&step.command.program, &step.command.args),
                cwd: step.command.cwd.clone(),
                outcome,
                last_lines: step_output(logs, service, &mut output),
                inputs: match &step.when {
                    PrepareWhen::Stale { sources, .. } => sources.clone(),
                    PrepareWhen::Always => Vec::new(),
                },
            });
        }
    }
    Ok(())
}

/// `program args…` for a report, with the program's directory left out.
fn shown_command(program: &str, args: &[String]) -> String {
    let name = Path::new(program)
        .file_name()
        .map_or_else(|| program.to_owned(), |n| n.to_string_lossy().into_owned());
    std::iter::once(name).chain(args.iter().cloned()).collect::<Vec<_>>().join(" ")
}

/// The last [`REPORT_LINES`] lines the step printed (from `output`, where
/// it began, on), without heartbeats.
fn step_output(logs: &LogStore, service: &str, output: &mut Cursor) -> Vec<String> {
    let own = |kept: &Kept| {
        matches!(kept, Kept::Line(line) if *line.service == *service
            && line.stream != Stream::Supervisor
            && !line.text.trim().is_empty())
    };
    let mut last = std::collections::VecDeque::new();
    loop {
        let read = logs.history().read(output, 64 * 1024, false, own);
        if read.kept.is_empty() {
            break;
        }
        for kept in read.kept {
            if let Kept::Line(line) = kept {
                last.push_back(line.text.clone());
                if last.len() > REPORT_LINES {
                    last.pop_front();
                }
            }
        }
    }
    last.into()
}

/// Polls `inputs` until one of them changes (modified time or size,
/// appearing or disappearing), then returns. Polling keeps the core free of
/// a file-watching dependency; a handful of `stat` calls a second costs
/// nothing.
pub(super) async fn wait_for_change(inputs: Vec<PathBuf>, every: Duration) {
    let fingerprint = || {
        inputs
            .iter()
            .map(|p| std::fs::metadata(p).ok().map(|m| (m.modified().ok(), m.len())))
            .collect::<Vec<_>>()
    };
    let before = fingerprint();
    loop {
        tokio::time::sleep(every).await;
        if fingerprint() != before {
            return;
        }
    }
}

/// Whether a prepare step must run now.
fn needed(when: &PrepareWhen) -> bool {
    match when {
        PrepareWhen::Always => true,
        PrepareWhen::Stale { target, sources } => {
            let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let Some(target_time) = modified(target) else {
                return true;
            };
            sources.iter().filter_map(modified).any(|t| t > target_time)
        }
    }
}

/// After a successful stale-only step, stamps its target with the current
/// time. Installers may leave `node_modules/` older than the lockfile they
/// rewrite at the end, which would otherwise make every start reinstall.
fn mark_fresh(when: &PrepareWhen) {
    if let PrepareWhen::Stale { target, .. } = when {
        // Its times set by name (a directory, as often as not): nothing
        // is opened.
        let now = nix::sys::time::TimeSpec::from(
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default(),
        );
        let _ = nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            target,
            &now,
            &now,
            nix::sys::stat::UtimensatFlags::FollowSymlink,
        );
    }
}
