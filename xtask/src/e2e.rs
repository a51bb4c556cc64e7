//! `cargo xtask test-e2e`: drive the real `omnidev` binary against copies of
//! the bundled example checkout, with real `uv`, `pnpm` and `tmux`.
//!
//! Each case gets a fresh temp HOME / XDG directories (uv and npm caches are
//! shared with the real home so runs stay fast) and a unique value of
//! `OMNIDEV_E2E_TAG` in its environment. Every process the pod starts inherits
//! that value, which is how a case finds "the processes of the pod" in `/proc`
//! and how the harness kills whatever a failed case left behind.

// The runner and its case table are here; the rest is one concern a file.
mod example;
mod harness;
mod processes;

// The cases, by area.
mod cli;
mod control;
mod dashboard;
mod database;
mod dist;
mod editfix;
mod hostnames;
mod install;
mod lifecycle;
mod mcp;
mod pod;
mod ports;
mod reload;
mod remote;
mod tui;
mod web;

use std::fs;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};

use self::example::{install_count, install_log, parse};
use self::harness::{Ctx, Harness, Pod, SOON, Server, UP, send_signal};
use self::processes::describe;
use crate::flags::TestE2e;
use crate::prereqs::{self, Step};
use crate::util;

/// A case named after its function: one name per case.
macro_rules! case {
    ($module:ident :: $function:ident) => {
        Case { name: stringify!($function), run: $module::$function }
    };
}

/// One end-to-end case.
struct Case {
    name: &'static str,
    run: fn(&mut Ctx) -> Result<()>,
}

/// Every case, in the order they run.
const CASES: &[Case] = &[
    case!(pod::up_headless_server_host_vite),
    case!(web::pnpm_workspace_installs_once_at_root),
    case!(web::failed_install_reported_once_then_fixed),
    case!(web::node_below_floor_backend_still_runs),
    case!(pod::two_checkouts_at_once_second_omnidev_refused),
    case!(lifecycle::py_change_reloads_server_then_host),
    case!(reload::package_moves_git_mv_and_mkdir_reload_once_each),
    case!(lifecycle::killed_server_restarts_with_backoff),
    case!(editfix::syntax_error_backoff_then_fix_restarts_once),
    case!(editfix::no_vite_no_ui_url_and_shutdown_lines_after_sigint),
    case!(lifecycle::sigint_sigterm_sighup_leave_no_process),
    case!(lifecycle::kill9_of_omnidev_leaves_no_process_within_2s),
    case!(lifecycle::killed_guard_is_replaced_then_kill9_leaves_no_process),
    case!(control::detach_status_logs_restart_stop),
    case!(control::ls_two_running_one_stopped),
    case!(control::agent_script_waits_and_reads_events),
    case!(control::control_socket_modes_stale_socket_clean),
    case!(mcp::inspector_cli_lists_and_calls_the_tools),
    case!(dashboard::dashboard_in_chromium_two_worktrees),
    case!(hostnames::pod_host_names_keep_cookies_apart),
    case!(hostnames::two_frontends_each_linked_to_its_own_backend),
    case!(database::databases_per_checkout_as_an_unprivileged_user),
    case!(ports::long_pod_path_detach_status_stop),
    case!(ports::foreign_server_on_the_pod_port_is_not_ready_and_the_port_moves),
    case!(ports::six_cache_roots_at_once_get_distinct_ports),
    case!(tui::tui_in_tmux_panes_and_quit),
    case!(tui::tui_ctrl_z_and_sigtstp_suspend_fg_restores),
    case!(tui::tui_shows_unfinished_lines_and_finishes_them_in_place),
    case!(tui::attach_tui_shows_the_server_restarts_it_and_detaches),
    case!(tui::tui_p_applies_an_edited_profile),
    case!(cli::headless_one_shot_exit_rule),
    case!(cli::run_uses_running_pod_ports_and_exit_code),
    case!(editfix::omnigent_in_a_never_started_checkout),
    case!(remote::up_host_over_real_sshd),
    case!(install::install_update_check_from_file_repo),
    case!(dist::dist_tarball_sha256_and_version),
];

/// Runs one case, the `index`th, and prints how it went (with the tails
/// of its outputs when it failed, under one lock of stdout so that the
/// lines of a case running beside it do not come between); whether it
/// passed.
fn run_case(harness: &Harness, index: usize, case: &Case) -> bool {
    let start = Instant::now();
    let mut ctx = match Ctx::new(harness, index, case.name) {
        Ok(ctx) => ctx,
        Err(error) => {
            println!("FAIL {} (set-up): {error:#}", case.name);
            return false;
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (case.run)(&mut ctx)))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(ToString::to_string))
                .unwrap_or_default();
            Err(anyhow!("the case panicked: {message}"))
        });
    let leftovers = ctx.cleanup();
    let outcome = outcome.and_then(|()| match leftovers {
        Some(list) => {
            Err(anyhow!("the case passed but left processes running (killed now):\n{list}"))
        }
        None => Ok(()),
    });
    let seconds = start.elapsed().as_secs_f64();
    let _whole = std::io::stdout().lock();
    match outcome {
        Ok(()) => {
            println!("ok   {} ({seconds:.1}s){}", case.name, ctx.notes());
            true
        }
        Err(error) => {
            println!("FAIL {} ({seconds:.1}s): {error:#}", case.name);
            ctx.print_output_tails();
            false
        }
    }
}

/// Run the selected cases; fails when any case fails.
pub fn run(options: &TestE2e) -> Result<()> {
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|case| {
            options.filters.is_empty()
                || options.filters.iter().any(|f| case.name.contains(f.as_str()))
        })
        .collect();
    if options.list {
        for case in &cases {
            println!("{}", case.name);
        }
        return Ok(());
    }
    if cases.is_empty() {
        bail!("no e2e case matches {:?} (see `cargo xtask test-e2e --list`)", options.filters);
    }
    // Before the first case: without uv (say) every case would run to its
    // timeout, 26 times over, before the run said why.
    let missing = prereqs::missing(&std::env::var_os("PATH").unwrap_or_default(), &[Step::E2e]);
    if !missing.is_empty() {
        bail!(prereqs::report(&missing));
    }
    let omnidev = match &options.omnidev {
        Some(path) => {
            fs::canonicalize(path).with_context(|| format!("--omnidev {}", path.display()))?
        }
        None => util::build_omnidev(&util::shell()?, "dev")?,
    };
    let harness = Harness::new(omnidev)?;
    println!(
        "e2e: {} case(s), {} at a time, against {} (temp dir {})",
        cases.len(),
        options.jobs.max(1),
        harness.omnidev.display(),
        harness.root.display()
    );

    // Cases run `jobs` at a time: most of a case's time is spent waiting
    // on its pod. They share one runtime dir, as one user's pods do, so
    // pods of cases running at once are given distinct ports.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new((0, 0));
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(index) else { return };
                    let ok = run_case(&harness, index, case);
                    let mut counts =
                        outcomes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if ok {
                        counts.0 += 1;
                    } else {
                        counts.1 += 1;
                    }
                }
            });
        }
    });
    let (passed, failed) = outcomes.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        println!("e2e: temp files kept in {}", harness.root.display());
        bail!("{failed} e2e case(s) failed");
    }
    if !options.keep {
        // Best effort: a case's files are only useful when it failed.
        let _ = fs::remove_dir_all(&harness.root);
    }
    Ok(())
}
