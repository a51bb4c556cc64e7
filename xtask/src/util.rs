//! Helpers shared by the tasks: paths, building omnidev, waiting, tiny HTTP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// A shell whose current directory is the workspace root.
/// Cargo's home: `$CARGO_HOME`, else `~/.cargo`.
pub fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())).join(".cargo"),
        PathBuf::from,
    )
}

pub fn shell() -> Result<Shell> {
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    Ok(sh)
}

/// The cargo target directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() { dir } else { workspace_root().join(dir) }
        }
        None => workspace_root().join("target"),
    }
}

/// `cargo build -p omnidev-cli` with `profile`, returning the binary's path.
pub fn build_omnidev(sh: &Shell, profile: &str) -> Result<PathBuf> {
    cmd!(sh, "cargo build --profile {profile} -p omnidev-cli --bin omnidev")
        .run()
        .context("building omnidev")?;
    let dir = if profile == "dev" { "debug" } else { profile };
    let binary = target_dir().join(dir).join("omnidev");
    if !binary.is_file() {
        bail!("cargo build succeeded but {} does not exist", binary.display());
    }
    Ok(binary)
}

/// Poll `probe` every 50 ms until it returns `Some`, or fail after `timeout`
/// with an error naming `what`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        if start.elapsed() > timeout {
            bail!("timed out after {:.1}s waiting for {what}", timeout.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A plain HTTP/1.0 GET on 127.0.0.1: the status code and body.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status =
        response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).with_context(
            || format!("no status line in the response to GET {path}: {response:?}"),
        )?;
    let body = response.split_once("\r\n\r\n").map_or(String::new(), |(_, body)| body.to_string());
    Ok((status, body))
}

/// The value after `"key": ` in a flat JSON text, unquoted (numbers,
/// strings without escapes, `null`). Enough for the example's responses
/// without a JSON dependency.
pub fn json_field(text: &str, key: &str) -> Option<String> {
    let needle = format!("\"{key}\":");
    let rest = text[text.find(&needle)? + needle.len()..].trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        return Some(quoted[..quoted.find('"')?].to_string());
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

/// The `packageManager` the bundled example pins (`pnpm@X.Y.Z`).
pub fn example_package_manager() -> Result<String> {
    let manifest = workspace_root().join("examples/omnigent-example/package.json");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    json_field(&text, "packageManager")
        .with_context(|| format!("no packageManager in {}", manifest.display()))
}

/// Remove ANSI escape sequences (CSI and OSC) from `text`.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\x07' || (c == '\x1b' && chars.peek() == Some(&'\\')) {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_field_reads_numbers_and_strings() {
        let text = r#"{"pid": 42, "env": {"OMNIGENT_URL": "http://127.0.0.1:1", "X": null}}"#;
        assert_eq!(json_field(text, "pid").as_deref(), Some("42"));
        assert_eq!(json_field(text, "OMNIGENT_URL").as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(json_field(text, "X").as_deref(), Some("null"));
        assert_eq!(json_field(text, "missing"), None);
    }

    #[test]
    fn strip_ansi_removes_colour_and_osc() {
        assert_eq!(strip_ansi("\x1b[32mgreen\x1b[0m plain"), "green plain");
        assert_eq!(strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "link");
    }
}
