//! A real OpenSSH server for `up --host`'s e2e case and bench rows:
//! Debian's sshd in a network namespace of its own (so a pod's ports
//! there and their forwards here are the same numbers on two loopbacks),
//! serving an unprivileged user `omnidev-host` (made when missing, its
//! home in a directory of its own) who knows nothing of omnidev, reached
//! as `omnihost` through an ssh wrapper (`OMNIDEV_SSH`). Needs root.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, ensure};

use crate::util;

/// Deadline for sshd to let the user in.
const SOON: std::time::Duration = std::time::Duration::from_secs(30);

/// The host's user.
const USER: &str = "omnidev-host";

/// A real sshd in a network namespace, and a client config to reach it
/// as `omnihost`.
pub struct SshHost {
    sshd: Option<Child>,
    netns: String,
    dir: PathBuf,
    /// `ssh -F <config>`, for `OMNIDEV_SSH`.
    pub ssh: PathBuf,
}

fn run(command: &mut Command) -> Result<()> {
    let description = format!("{command:?}");
    let output = command.stdin(Stdio::null()).output().with_context(|| description.clone())?;
    ensure!(
        output.status.success(),
        "{description} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

impl SshHost {
    pub fn start() -> Result<Self> {
        ensure!(
            nix::unistd::geteuid().is_root(),
            "this case needs root (a network namespace, a user, sshd)"
        );
        let sshd = Path::new("/usr/sbin/sshd");
        ensure!(sshd.exists(), "no /usr/sbin/sshd: apt-get install openssh-server");
        let id = std::process::id();
        let netns = format!("omh-{id}");
        let net = 20 + id % 200;
        let (here, there) = (format!("10.203.{net}.1"), format!("10.203.{net}.2"));
        // Short and of its own: the host user's home must not be under a
        // directory the user cannot enter.
        let dir = std::env::temp_dir().join(format!("omnidev-host-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("home"))?;
        fs::create_dir_all(dir.join("keys"))?;
        std::os::unix::fs::chown(&dir, Some(0), Some(0))?;
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let quiet = |c: &mut Command| c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        if !quiet(Command::new("id").arg(USER))?.success() {
            run(Command::new("useradd").args([
                "--system",
                "--no-create-home",
                "--shell",
                "/bin/sh",
                USER,
            ]))?;
        }
        let home = dir.join("home");
        run(Command::new("usermod").arg("-d").arg(&home).args(["-s", "/bin/sh", "-p", "*", USER]))?;
        run(Command::new("chown").arg(USER).arg(&home))?;
        let keys = dir.join("keys");
        for key in ["host", "client"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", ""])
                .arg("-f")
                .arg(keys.join(key)))?;
        }
        fs::copy(keys.join("client.pub"), dir.join("authorized_keys"))?;
        fs::create_dir_all("/run/sshd")?;
        let config = dir.join("sshd_config");
        fs::write(
            &config,
            format!(
                "ListenAddress {there}\nPort 22\nHostKey {}\nPidFile none\nAuthorizedKeysFile {}\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes no\nAllowUsers {USER}\n",
                keys.join("host").display(),
                dir.join("authorized_keys").display()
            ),
        )?;
        run(Command::new("ip").args(["netns", "add", &netns]))?;
        // From here on, dropping it cleans up.
        let mut host = Self { sshd: None, netns, dir, ssh: PathBuf::new() };
        let ns = host.netns.clone();
        link_namespace(&ns, &here, &there)?;
        let log = fs::File::create(host.dir.join("sshd.log"))?;
        host.sshd = Some(
            Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(sshd)
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?,
        );
        let host_key = fs::read_to_string(keys.join("host.pub"))?;
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        fs::write(host.dir.join("known_hosts"), format!("{there} {}\n", host_key.join(" ")))?;
        fs::write(
            host.dir.join("ssh_config"),
            format!(
                "Host omnihost\n  HostName {there}\n  User {USER}\n  IdentityFile {}\n  \
                 IdentitiesOnly yes\n  UserKnownHostsFile {}\n  GlobalKnownHostsFile /dev/null\n",
                keys.join("client").display(),
                host.dir.join("known_hosts").display()
            ),
        )?;
        host.ssh = host.dir.join("ssh");
        fs::write(
            &host.ssh,
            format!("#!/bin/sh\nexec ssh -F {} \"$@\"\n", host.dir.join("ssh_config").display()),
        )?;
        fs::set_permissions(&host.ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        util::wait_for("sshd to let the host user in", SOON, || {
            Ok(host.there("true").is_ok().then_some(()))
        })
        .with_context(|| {
            format!(
                "sshd said: {}",
                fs::read_to_string(host.dir.join("sshd.log")).unwrap_or_default()
            )
        })?;
        Ok(host)
    }

    /// Runs `script` there as the host user; its standard output.
    pub fn there(&self, script: &str) -> Result<String> {
        let output = Command::new(&self.ssh)
            .args(["-o", "BatchMode=yes", "omnihost", script])
            .stdin(Stdio::null())
            .output()?;
        ensure!(
            output.status.success(),
            "`{script}` there failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// The host user's processes but sshd's own and those already ended.
pub fn user_processes() -> Result<Vec<String>> {
    let output = Command::new("ps").args(["-u", USER, "-o", "pid=,stat=,args="]).output()?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|line| {
            let mut parts = line.split_whitespace();
            let (_, stat) = (parts.next(), parts.next().unwrap_or(""));
            !stat.starts_with('Z') && !parts.next().unwrap_or("").starts_with("sshd")
        })
        .map(str::to_owned)
        .collect())
}

impl Drop for SshHost {
    fn drop(&mut self) {
        // Whatever a failed run left there: the user's pods, then sshd
        // (by its pid) and the namespace (its veth goes with it).
        let _ = self.there(
            "for d in .cache/omnidev-host/checkouts/*; do for o in .cache/omnidev-host/bin/*; do \
             \"$o\" stop --repo \"$d\" >/dev/null 2>&1; break; done; done",
        );
        if let Some(sshd) = &mut self.sshd {
            let _ = sshd.kill();
            let _ = sshd.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A veth pair between here (`here`) and the namespace `ns` (`there`),
/// and the namespace's loopback up.
fn link_namespace(ns: &str, here: &str, there: &str) -> Result<()> {
    let id = std::process::id() % 100_000;
    let (outside, inside) = (format!("omh{id}a"), format!("omh{id}b"));
    run(
        Command::new("ip").args(["link", "add", &outside, "type", "veth", "peer", "name", &inside])
    )?;
    run(Command::new("ip").args(["link", "set", &inside, "netns", ns]))?;
    run(Command::new("ip").args(["addr", "add", &format!("{here}/30"), "dev", &outside]))?;
    run(Command::new("ip").args(["link", "set", &outside, "up"]))?;
    for args in [
        vec!["addr", "add", &format!("{there}/30"), "dev", &inside],
        vec!["link", "set", &inside, "up"],
        vec!["link", "set", "lo", "up"],
    ] {
        run(Command::new("ip").args(["netns", "exec", ns, "ip"]).args(args))?;
    }
    Ok(())
}
