//! `omnidev mcp [--allow-up]`: serve this checkout's pod to a coding agent
//! as Model Context Protocol tools over stdin/stdout (see [`crate::mcp`]).

use std::process::ExitCode;

use crate::cli::McpArgs;

/// Runs `omnidev mcp` until the client closes its end (exit 0). Nothing but
/// protocol messages is written to stdout.
pub fn run(args: &McpArgs) -> miette::Result<ExitCode> {
    crate::session::runtime(false)?.block_on(crate::mcp::serve(args.pod.clone(), args.allow_up))?;
    Ok(ExitCode::SUCCESS)
}
