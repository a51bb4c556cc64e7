//! The dashboard's secret: a new one each time a dashboard starts, kept
//! 0600 in the runtime dir (itself 0700), never on a command line and
//! never sent to a port not proven to be this user's dashboard.
//!
//! A dashboard is proven by a challenge: the asker sends a random value,
//! the dashboard answers with its HMAC-SHA256 under the secret, and the
//! asker checks it. A squatter on the port learns a random value, nothing
//! else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hmac::{KeyInit as _, Mac as _};

use crate::error::Error;

/// The file in the runtime dir that holds the running dashboard's secret.
const TOKEN_FILE: &str = "dashboard-token";

/// The file `--open` hands the browser: a page that goes on to the URL,
/// so the secret is in no process's arguments.
const OPEN_FILE: &str = "dashboard-open.html";

/// What the proof of a challenge is computed over, before the challenge.
const PROOF_CONTEXT: &[u8] = b"omnidev dashboard proof\n";

/// The secret of the dashboard that last started, when there is one.
pub fn current(runtime_dir: &Path) -> Option<String> {
    let bytes = omnidev_core::fs::read_file(&runtime_dir.join(TOKEN_FILE), 1024).ok()??;
    let text = String::from_utf8(bytes).ok()?;
    well_formed(&text).then_some(text)
}

/// A new secret, written in place of the last one (atomically, 0600):
/// whatever a stopped dashboard's pages or a squatter kept is worth
/// nothing now.
pub fn rotate(runtime_dir: &Path) -> miette::Result<String> {
    let path = runtime_dir.join(TOKEN_FILE);
    let text = omnidev_pod::ids::random_hex(32).map_err(Error::io("make", "a secret"))?;
    omnidev_core::fs::write_atomic(&path, text.as_bytes()).map_err(Error::io("write", &path))?;
    Ok(text)
}

/// Whether `text` has a secret's shape (64 hex digits).
pub fn well_formed(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The proof of `challenge` under `secret` (hex).
pub fn proof(secret: &str, challenge: &str) -> String {
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        // HMAC takes a key of any length.
        unreachable!("an HMAC key of any length");
    };
    mac.update(PROOF_CONTEXT);
    mac.update(challenge.as_bytes());
    omnidev_pod::ids::hex(&mac.finalize().into_bytes())
}

/// Whether this user's dashboard answers on `port`: it proves it holds
/// `secret` without the secret being sent (see the module docs).
pub fn answers(port: u16, secret: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(challenge) = omnidev_pod::ids::random_hex(32) else {
        return false;
    };
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let asked = write!(
        stream,
        "GET {}?challenge={challenge} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Connection: close\r\n\r\n",
        super::PROVE_PATH
    );
    // Whatever comes back is read up to a bound and compared, no more.
    let mut answer = Vec::new();
    if asked.is_err() || (&mut stream).take(4096).read_to_end(&mut answer).is_err() {
        return false;
    }
    let answer = String::from_utf8_lossy(&answer);
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    head.starts_with("HTTP/1.1 200 ") && body.trim() == proof(secret, &challenge)
}

/// Writes the page `--open` hands the browser, which goes on to `url`,
/// and returns its path (in the private runtime dir, 0600).
pub fn open_file(runtime_dir: &Path, url: &str) -> miette::Result<PathBuf> {
    let path = runtime_dir.join(OPEN_FILE);
    // The URL is digits, hex and punctuation of our own: nothing to escape.
    let page = format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\">\n<title>omnidev dashboard</title>\n\
         <a href=\"{url}\">Open the omnidev dashboard</a>\n"
    );
    omnidev_core::fs::write_atomic(&path, page.as_bytes()).map_err(Error::io("write", &path))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_needs_the_secret_and_the_challenge() {
        let secret = "ab".repeat(32);
        let one = proof(&secret, "00");
        assert_eq!(one.len(), 64);
        assert_eq!(one, proof(&secret, "00"));
        assert_ne!(one, proof(&secret, "01"));
        assert_ne!(one, proof(&"cd".repeat(32), "00"));
        assert!(!one.contains(&secret));
    }

    #[test]
    fn a_secret_is_rotated_and_kept_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(current(dir.path()), None);
        let first = rotate(dir.path()).expect("rotate");
        assert!(well_formed(&first));
        assert_eq!(current(dir.path()).as_deref(), Some(first.as_str()));
        let second = rotate(dir.path()).expect("rotate");
        assert_ne!(first, second);
        assert_eq!(current(dir.path()), Some(second));
        let mode =
            std::fs::metadata(dir.path().join(TOKEN_FILE)).expect("stat").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}
