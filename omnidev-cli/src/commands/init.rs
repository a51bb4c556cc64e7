//! `omnidev init`: writes a commented `omnidev.toml` for the checkout
//! (from its `Procfile` when it has one) and says how to run it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use crate::cli::InitArgs;
use crate::error::{Error, Result};

/// Writes the profile through [`omnidev_pod::init::write`] (which refuses
/// an existing one unless `--force`) and prints what it wrote.
pub fn run(args: &InitArgs) -> Result<ExitCode> {
    let cwd = crate::session::current_dir()?;
    let repo = omnidev_pod::resolve_repo_root(&cwd, args.repo.as_deref())?;
    let written = omnidev_pod::init::write(&repo, args.procfile.as_deref(), args.force)?;
    let mut text = format!(
        "{} {}",
        if written.replaced { "replaced" } else { "wrote" },
        written.path.display()
    );
    match &written.procfile {
        Some(procfile) => {
            let _ = write!(text, " from {}", procfile.display());
        }
        None => text.push_str(" (no Procfile: a template to edit)"),
    }
    let _ = write!(
        text,
        ": {} service{} ({})",
        written.services.len(),
        if written.services.len() == 1 { "" } else { "s" },
        written.services.join(", ")
    );
    if !written.databases.is_empty() {
        let _ = write!(
            text,
            "; {} database{} ({})",
            written.databases.len(),
            if written.databases.len() == 1 { "" } else { "s" },
            written.databases.join(", ")
        );
    }
    text.push('\n');
    for note in &written.notes {
        let _ = writeln!(text, "  {}", omnidev_core::text::plain(note));
    }
    text.push_str(
        "next: omnidev profile check   checks it and shows the start order\n      \
         omnidev                 runs the pod (omnidev up --detach: in the background)\n",
    );
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(Error::Stdout)?;
    Ok(ExitCode::SUCCESS)
}
