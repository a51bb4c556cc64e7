//! `omnidev up`: set up the pod (`session`), start the supervisor, the
//! watchers and the control socket, then hand over to a front-end (the TUI
//! or the headless printer) until a signal or the pod settles.

use std::process::ExitCode;

use omnidev_core::{Lossless, Supervisor};

use crate::error::{Error, Result};
use crate::live_profile::{LiveProfile, ProfileWatcher};
use crate::run_options::{Front, RunOptions};
use crate::session::{self, PreparedPod};
use crate::{headless, tui, watch};

/// Runs `omnidev up` in the foreground (and, headless, as the background
/// process of `up --detach`).
pub fn run(options: &RunOptions) -> Result<ExitCode> {
    let mut checkout = session::resolve_checkout(&options.pod)?;
    session::check_run(&mut checkout, options)?;
    if let omnidev_pod::LockState::Held { pid } = crate::control::lock_state(&checkout.pod_dir)? {
        return Err(Error::UpRunning {
            pod_dir: checkout.pod_dir,
            pid,
            same_pod: options.pod.same_pod(),
        });
    }
    let prepared = session::prepare(checkout, options)?;
    crate::session::runtime(true)?.block_on(run_pod(prepared, options))
}

/// What the front-end reads: the TUI the supervisor's history through a
/// cursor, headless output a lossless one.
enum FrontEvents {
    Tui,
    Headless(Lossless),
}

async fn run_pod(prepared: PreparedPod, options: &RunOptions) -> Result<ExitCode> {
    let use_tui = options.front == Front::Tui;
    let debounce = options.debounce.unwrap_or(prepared.rendered.debounce);
    // Installed before anything is spawned so no signal is lost.
    let mut signals = omnidev_core::signals::ShutdownSignals::new().map_err(Error::Runtime)?;
    // Subscribed before any service starts, so no event (leftover notices,
    // the first lines of output) is missed by the front-end. Headless
    // output is lossless: it spools into the pod directory while behind.
    let mut config = session::supervisor_config(&prepared);
    // A port lost to another process is moved (and the socket shows it).
    let addresses = session::Addresses::of(&prepared);
    let live = std::sync::Arc::new(LiveProfile::new(&prepared, addresses.clone(), use_tui));
    config.port_mover = Some(live.clone());
    config.containment = options.containment.clone();
    config.debug = options.debug;
    // Every front-end sees the first event (the control socket's readers
    // read the supervisor's history, which has it too).
    let builder = Supervisor::builder(config)?;
    let front = if use_tui {
        FrontEvents::Tui
    } else {
        FrontEvents::Headless(builder.history().lossless(prepared.pod.dir()))
    };
    // What each link resolved to, told before anything runs.
    for (name, linked) in &prepared.ports.context.links {
        let kind = omnidev_core::EventKind::Link {
            name: name.clone(),
            checkout: linked.checkout.clone(),
            pod_dir: linked.pod_dir.clone(),
            ports: linked.ports.0.clone(),
        };
        (builder.history()).push_event(&omnidev_core::Event::pod(kind));
    }
    let supervisor = builder.run().await?;
    let (watchers, watch_notices) =
        match watch::start_watchers(&prepared, debounce, options.debug, &supervisor) {
            Ok(w) => w,
            Err(e) => {
                let _ = supervisor.shutdown().await;
                return Err(e);
            }
        };
    // A change to the profile file is announced, not applied.
    let profile_watcher = ProfileWatcher::start(live.clone(), &supervisor, debounce);
    let mut prepared = prepared;
    prepared.notices.extend(watch_notices);
    // `status`, `stop`, `restart` and `up --detach` talk to this socket: a
    // pod they cannot reach is an error at start, not a line in a log.
    let mut info = crate::control::ServerInfo::of(&prepared, addresses.clone());
    info.live = Some(live.clone());
    let control = match crate::control::ControlServer::start(info, supervisor.clone()) {
        Ok(server) => server,
        Err(e) => {
            drop(watchers);
            let _ = supervisor.shutdown().await;
            return Err(e);
        }
    };
    let code = match front {
        FrontEvents::Tui => {
            tui::run_pod(&prepared, &supervisor, &mut signals, &addresses, &live).await
        }
        FrontEvents::Headless(reader) => {
            headless::run_pod(&prepared, &supervisor, reader, &mut signals, options).await
        }
    };
    drop(watchers);
    drop(profile_watcher);
    let stopped = session::stop_pod(&supervisor, &mut signals).await;
    if use_tui {
        // For the control socket's followers (headless output announced
        // it before its last lines).
        supervisor.announce_end();
    }
    control.finish().await;
    drop(prepared);
    let code = code?;
    stopped?;
    Ok(code)
}
