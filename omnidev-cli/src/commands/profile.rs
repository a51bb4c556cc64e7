//! `omnidev profile show`: print the effective profile.

use std::io::Write;
use std::process::ExitCode;

use omnidev_pod::{Profile, ProfileSource};

use crate::cli::ProfileShowArgs;
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
            ProfileSource::Repo(path) | ProfileSource::File(path) => format!(
                "# effective profile from {}\n{}",
                path.display(),
                profile.to_toml()?
            ),
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(Error::Stdout)?;
    Ok(ExitCode::SUCCESS)
}

/// The embedded profile verbatim: its own opening comment says what it is
/// and how to start a profile from it.
fn embedded_text() -> String {
    omnidev_pod::profile::OMNIGENT_PROFILE.to_owned()
}
