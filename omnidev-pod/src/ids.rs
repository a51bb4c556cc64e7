//! The names omnidev makes: a path's hash (a checkout's pod directory, a
//! pod's socket directory) and random ids (a pod's, the dashboard's
//! secret), as lower-case hex.

use std::path::Path;

use sha2::{Digest, Sha256};

/// The first `bytes` bytes of the SHA-256 of a path's bytes, as hex: the
/// names omnidev gives a checkout's pod directory and a pod's socket
/// directory.
pub fn path_hash(path: &Path, bytes: usize) -> String {
    use std::os::unix::ffi::OsStrExt;
    hex(&Sha256::digest(path.as_os_str().as_bytes())[..bytes])
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// `bytes` random bytes from the system's source, as hex: a pod's id, the
/// dashboard's secret.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut random = vec![0; bytes];
    getrandom::fill(&mut random)?;
    Ok(hex(&random))
}
