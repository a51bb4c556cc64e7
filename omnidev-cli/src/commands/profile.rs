//! `omnidev profile show` prints the effective profile; `omnidev profile
//! check` validates it without running anything.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use omnidev_core::{Condition, ProbeSpec, RestartPolicy};
use omnidev_pod::{Ports, Profile, ProfileSource, RenderContext};

use crate::cli::{ProfileCheckArgs, ProfileShowArgs};
use crate::error::{Error, Result};

/// Prints the effective profile: `--profile FILE`, else the checkout's
/// `omnidev.toml`, else the embedded Omnigent profile (verbatim, comments
/// included, so it can be copied into a new `omnidev.toml`). Outside a
/// checkout the embedded profile is shown.
pub fn show(args: &ProfileShowArgs) -> Result<ExitCode> {
    let text = if args.embedded {
        embedded_text()
    } else {
        let cwd = crate::session::current_dir()?;
        let (profile, source) = if let Some(file) = &args.profile {
            (Profile::from_file(file)?, ProfileSource::File(file.clone()))
        } else {
            match omnidev_pod::resolve_repo_root(&cwd, args.repo.as_deref()) {
                Ok(repo) => Profile::load(&repo, None)?,
                // Not in a checkout: the embedded profile is still useful.
                Err(_) if args.repo.is_none() => (Profile::omnigent(), ProfileSource::Embedded),
                Err(e) => return Err(e.into()),
            }
        };
        match source {
            ProfileSource::Embedded => embedded_text(),
            ProfileSource::Repo(path) | ProfileSource::File(path) => {
                format!("# effective profile from {}\n{}", path.display(), profile.to_toml()?)
            }
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(Error::Stdout)?;
    Ok(ExitCode::SUCCESS)
}

/// A warning when `command`'s program is not an executable file where
/// the service will look for it: on the `PATH` it gets (its own, else
/// this one's) or, with a slash, from its directory. For a shell's script
/// (`sh -c '…'`, what `omnidev init` writes for a Procfile line), the
/// program is the script's first word when that is plainly one.
fn missing_program(command: &omnidev_core::CommandSpec, prepared: bool) -> Option<String> {
    use omnidev_core::fs::{is_executable, which};
    let program = script_program(command).unwrap_or(&command.program);
    let found = if program.contains('/') {
        is_executable(&command.cwd.join(program))
    } else {
        let path = command
            .env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        which(program, &path).is_some()
    };
    let after = if prepared { " (unless a prepare step installs it)" } else { "" };
    (!found).then(|| {
        format!(
            "WARNING: `{program}` is not on the PATH the service gets{after}; \
             install it, or add a prepare step that does"
        )
    })
}

/// The program a `sh -c SCRIPT` (or bash, dash, zsh) command runs first:
/// the script's first word, after an `exec`, when it is a plain word (no
/// quoting, expansion, assignment or operator a guess could get wrong).
fn script_program(command: &omnidev_core::CommandSpec) -> Option<&str> {
    let shell = command.program.rsplit('/').next()?;
    let ["-c", script, ..] = command.args.iter().map(String::as_str).collect::<Vec<_>>()[..] else {
        return None;
    };
    if !["sh", "bash", "dash", "zsh"].contains(&shell) {
        return None;
    }
    let mut words = script.split_ascii_whitespace();
    let word = words.next().filter(|w| *w != "exec").or_else(|| words.next())?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./+".contains(c);
    word.chars().all(plain).then_some(word)
}

/// What `profile check` warns of for `spec`: a watch rule of it (among
/// `watch`) that matches no file under `checkout`, and the service being
/// unavailable or its program missing.
fn warnings(
    spec: &omnidev_core::ServiceSpec,
    watch: &[omnidev_pod::profile::render::WatchRule],
    checkout: &std::path::Path,
) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for rule in watch.iter().filter(|rule| rule.service == spec.name) {
        if !crate::watch::matches_a_file(checkout, &rule.globs)? {
            said.push(format!(
                "WARNING: watch {} matches no file in the checkout (a change there would \
                 never reload it); check the rule's path",
                rule.globs.join(", ")
            ));
        }
    }
    if let Some(reason) = &spec.unavailable {
        said.push(format!("UNAVAILABLE: {reason}"));
    } else if let Some(warning) = missing_program(&spec.command, !spec.prepare.is_empty()) {
        said.push(warning);
    }
    Ok(said)
}

/// A service's command, its words quoted where they need it.
fn shown_command(spec: &omnidev_core::ServiceSpec) -> String {
    let words: Vec<String> = std::iter::once(&spec.command.program)
        .chain(&spec.command.args)
        .map(|word| {
            if word.is_empty() || word.contains([' ', '"', '\'']) {
                format!("{word:?}")
            } else {
                word.clone()
            }
        })
        .collect();
    words.join(" ")
}

/// The warning naming what `[pod] expected-env` lists and no service gets
/// (from the environment, an env file or the profile); empty when none.
fn unset_expected(
    profile: &Profile,
    ctx: &RenderContext,
    rendered: &omnidev_pod::RenderedPod,
) -> String {
    let unset: Vec<&str> = (profile.pod.expected_env.iter())
        .filter(|name| {
            !ctx.inherited_env.contains_key(*name)
                && !(rendered.services.iter()).any(|s| s.command.env.get(name).is_some())
        })
        .map(String::as_str)
        .collect();
    if unset.is_empty() {
        return String::new();
    }
    format!(
        "WARNING: unset: {} ([pod] expected-env): set {} in .env, the environment or [env]\n",
        unset.join(", "),
        if unset.len() == 1 { "it" } else { "them" }
    )
}

/// The embedded profile verbatim: its own opening comment says what it is
/// and how to start a profile from it.
fn embedded_text() -> String {
    omnidev_pod::profile::OMNIGENT_PROFILE.to_owned()
}

/// `profile` checked and rendered as `omnidev up` with no flags would in
/// `repo` (on the engine its pod recorded, the profile's base ports
/// standing in for the pod's), nothing written.
fn render_as_up(
    mut profile: Profile,
    repo: &std::path::Path,
) -> Result<(Profile, RenderContext, omnidev_pod::RenderedPod)> {
    let cache_root = omnidev_pod::pod::cache_root()?;
    let pod_dir = omnidev_pod::pod::default_pod_dir(&cache_root, repo);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let none = std::collections::BTreeMap::new();
    let run = omnidev_pod::RunChoice {
        db: omnidev_pod::Pod::at(&pod_dir).db_engine(),
        scale: &none,
        selection: &omnidev_pod::Selection::default(),
        path: &path,
    };
    profile.check_run(repo, &run)?;
    let ports = Ports(profile.port_bases(&none).into_iter().collect());
    let mut ctx = RenderContext::from_process_env(repo.to_owned(), pod_dir, ports);
    ctx.links = omnidev_pod::link::resolve(
        &profile,
        repo,
        &cache_root,
        &std::collections::BTreeMap::default(),
    )?;
    ctx.omnidev = std::env::current_exe().ok();
    let rendered = profile.render(&ctx)?;
    Ok((profile, ctx, rendered))
}

/// Loads the effective profile (`--profile FILE`, else the checkout's) and
/// renders it as `omnidev up` would — the profile's base ports standing in
/// for the pod's, the current environment and `PATH` — without writing or
/// starting anything. Every problem `up` would meet before starting a
/// service is an error (exit 1); otherwise the services are printed in
/// start order with what each waits for.
pub fn check(args: &ProfileCheckArgs) -> Result<ExitCode> {
    let cwd = crate::session::current_dir()?;
    let checkout = omnidev_pod::resolve_repo_root(&cwd, args.repo.as_deref())?;
    let (profile, source) = Profile::load(&checkout, args.profile.as_deref())?;
    let (profile, ctx, rendered) = render_as_up(profile, &checkout)?;
    let order = omnidev_core::start_order(&rendered.services)?;
    let origin = match &source {
        ProfileSource::Embedded => "the embedded Omnigent profile".to_owned(),
        ProfileSource::Repo(path) | ProfileSource::File(path) => path.display().to_string(),
    };
    let mut text = format!(
        "{origin}: ok, {} service{} in start order (ports shown at their bases)\n",
        order.len(),
        if order.len() == 1 { "" } else { "s" }
    );
    let width = rendered.services.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for index in order {
        let spec = &rendered.services[index];
        let mut facts = Vec::new();
        if !spec.depends_on.is_empty() {
            let waits: Vec<String> = spec
                .depends_on
                .iter()
                .map(|d| {
                    let condition = match d.condition {
                        Condition::Started => "started",
                        Condition::Ready => "ready",
                        Condition::Completed => "completed",
                    };
                    format!("{} {condition}", d.service)
                })
                .collect();
            facts.push(format!("after {}", waits.join(", ")));
        }
        facts.push(match spec.readiness.as_ref().map(|r| &r.probe) {
            None => "no readiness probe".to_owned(),
            Some(ProbeSpec::Http { url, .. }) => format!("ready: http {url}"),
            Some(ProbeSpec::Tcp { address }) => format!("ready: tcp {address}"),
            Some(ProbeSpec::Command(_)) => "ready: a command".to_owned(),
            Some(ProbeSpec::Log { pattern }) => format!("ready: log /{pattern}/"),
        });
        facts.push(
            match spec.restart {
                RestartPolicy::Always => "restart always",
                RestartPolicy::OnFailure => "restart on failure",
                RestartPolicy::Never => "never restarted",
            }
            .to_owned(),
        );
        if spec.yields {
            facts.push("yields while the others start".to_owned());
        }
        // A database's server is the pod's own script: said, not shown.
        let server = (profile.databases.get(&spec.name)).filter(|d| d.engine.is_server());
        let command = if let Some(database) = server {
            format!(
                "a {} server of the pod's own, its data in {}",
                database.engine.word(),
                database.data_dir(&spec.name, &ctx.pod_dir).display()
            )
        } else {
            facts.extend(warnings(spec, &rendered.watch, &checkout)?);
            shown_command(spec)
        };
        let _ = writeln!(
            text,
            "  {:width$}  {}\n  {:width$}  {}",
            spec.name,
            omnidev_core::text::plain(&command),
            "",
            omnidev_core::text::plain(&facts.join("; ")),
        );
    }
    text.push_str(&unset_expected(&profile, &ctx, &rendered));
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(Error::Stdout)?;
    Ok(ExitCode::SUCCESS)
}
