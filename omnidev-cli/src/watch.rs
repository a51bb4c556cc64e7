//! The backend file watcher: content changes only, `__pycache__` and
//! gitignored files skipped, bursts coalesced into one trigger.
//!
//! Debouncing is trailing-edge: a trigger fires once no relevant change has
//! arrived for the debounce period, so 20 writes in 100 ms are one reload.
//! (notify-debouncer-full expires each event on its own timer and can split
//! such a burst into several batches, which would mean several reloads.)

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};

use omnidev_core::Supervisor;

use crate::error::{Error, Result};
use crate::session::PreparedPod;

/// What to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchConfig {
    /// The repository root; patterns and `.gitignore` are relative to it.
    pub root: PathBuf,
    /// Gitignore-style globs of the files whose changes count, e.g.
    /// `omnigent/**/*.py`.
    pub patterns: Vec<String>,
    /// Quiet period that ends a burst.
    pub debounce: Duration,
}

/// Decides which paths of a notify event count as a change.
#[derive(Debug)]
struct Filter {
    root: PathBuf,
    wanted: Override,
    ignored: Gitignore,
}

impl Filter {
    fn new(root: &Path, patterns: &[String]) -> Result<Self> {
        let glob_error = |pattern: &str, source: ignore::Error| Error::WatchPattern {
            pattern: pattern.to_owned(),
            source,
        };
        let mut wanted = OverrideBuilder::new(root);
        for pattern in patterns {
            wanted.add(pattern).map_err(|e| glob_error(pattern, e))?;
        }
        let wanted = wanted.build().map_err(|e| glob_error("", e))?;
        let mut ignored = GitignoreBuilder::new(root);
        for file in [root.join(".gitignore"), root.join(".git/info/exclude")] {
            if file.is_file() {
                // A broken line in .gitignore only loses that line.
                let _ = ignored.add(file);
            }
        }
        let ignored = ignored.build().unwrap_or_else(|_| Gitignore::empty());
        Ok(Self {
            root: root.to_path_buf(),
            wanted,
            ignored,
        })
    }

    fn kind_counts(kind: EventKind) -> bool {
        match kind {
            // Attribute changes (chmod, atime) are not content.
            EventKind::Modify(ModifyKind::Metadata(_)) => false,
            // Content: creation, removal, writes, renames; and a file opened
            // for writing being closed (`touch`, some editors).
            EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(_)
            | EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            // Reads (Python imports open every module) and the rest.
            EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
        }
    }

    fn path_counts(&self, path: &Path) -> bool {
        let Ok(relative) = path.strip_prefix(&self.root) else {
            return false;
        };
        if relative
            .components()
            .any(|c| c == Component::Normal("__pycache__".as_ref()))
        {
            return false;
        }
        let is_dir = path.is_dir();
        if !matches!(self.wanted.matched(relative, is_dir), Match::Whitelist(_)) {
            return false;
        }
        !self
            .ignored
            .matched_path_or_any_parents(relative, is_dir)
            .is_ignore()
    }

    fn relevant(&self, event: &notify::Event) -> Vec<PathBuf> {
        if !Self::kind_counts(event.kind) {
            return Vec::new();
        }
        event
            .paths
            .iter()
            .filter(|p| self.path_counts(p))
            .cloned()
            .collect()
    }
}

/// The directory a glob can only match under: its components up to the
/// first one holding a glob character.
fn literal_base(pattern: &str) -> PathBuf {
    let pattern = pattern.trim_start_matches('/');
    let mut base = PathBuf::new();
    let mut parts = pattern.split('/').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() || part.contains(['*', '?', '[', '{', '!']) {
            break;
        }
        base.push(part);
    }
    base
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Watcher {
    _inner: notify::RecommendedWatcher,
    watched: Vec<PathBuf>,
}

impl Watcher {
    /// Starts watching and calls `on_change` with the changed paths once per
    /// burst, on a background thread.
    pub fn start<F>(config: &WatchConfig, mut on_change: F) -> Result<Self>
    where
        F: FnMut(Vec<PathBuf>) + Send + 'static,
    {
        let root = std::fs::canonicalize(&config.root).map_err(|source| Error::Watch {
            path: config.root.clone(),
            source: notify::Error::io(source),
        })?;
        let filter = Filter::new(&root, &config.patterns)?;
        let (tx, rx) = mpsc::channel::<Vec<PathBuf>>();
        let mut inner = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                let paths = filter.relevant(&event);
                if !paths.is_empty() {
                    let _ = tx.send(paths);
                }
            }
        })
        .map_err(|source| Error::Watch {
            path: root.clone(),
            source,
        })?;
        let mut bases: BTreeSet<PathBuf> = BTreeSet::new();
        for pattern in &config.patterns {
            bases.insert(root.join(literal_base(pattern)));
        }
        // Watch the outermost existing bases only.
        let mut watched: Vec<PathBuf> = Vec::new();
        for base in bases {
            if !base.is_dir() || watched.iter().any(|w| base.starts_with(w)) {
                continue;
            }
            inner
                .watch(&base, RecursiveMode::Recursive)
                .map_err(|source| Error::Watch {
                    path: base.clone(),
                    source,
                })?;
            watched.push(base);
        }
        let debounce = config.debounce;
        std::thread::Builder::new()
            .name("omnidev-watch".to_owned())
            .spawn(move || {
                // Ends when the notify watcher (holding the sender) is dropped.
                while let Ok(first) = rx.recv() {
                    let mut batch: BTreeSet<PathBuf> = first.into_iter().collect();
                    loop {
                        match rx.recv_timeout(debounce) {
                            Ok(more) => batch.extend(more),
                            Err(mpsc::RecvTimeoutError::Timeout) => break,
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        }
                    }
                    on_change(batch.into_iter().collect());
                }
            })
            .map_err(|source| Error::Watch {
                path: root.clone(),
                source: notify::Error::io(source),
            })?;
        Ok(Self {
            _inner: inner,
            watched,
        })
    }

    /// The directories actually watched (bases of the patterns that exist).
    pub fn watched(&self) -> &[PathBuf] {
        &self.watched
    }
}

/// Starts one watcher per watch rule; each burst of changes reloads the
/// rule's service (its dependents follow, by the supervisor's rules).
/// Returns the watchers (dropping them stops watching) and a line per rule
/// saying what is watched.
pub fn start_watchers(
    prepared: &PreparedPod,
    debounce: Duration,
    supervisor: &Supervisor,
) -> Result<(Vec<Watcher>, Vec<String>)> {
    let mut notices = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut watchers = Vec::new();
    for rule in &prepared.rendered.watch {
        let tx = tx.clone();
        let service = rule.service.clone();
        let watcher = Watcher::start(
            &WatchConfig {
                root: prepared.checkout.repo.clone(),
                patterns: rule.globs.clone(),
                debounce,
            },
            move |_paths| {
                let _ = tx.send(service.clone());
            },
        )?;
        notices.push(if watcher.watched().is_empty() {
            format!(
                "warning: nothing to watch for {} ({} matches no directory)",
                rule.service,
                rule.globs.join(", ")
            )
        } else {
            format!(
                "{} reloads on changes to {} (debounce {})",
                rule.service,
                rule.globs.join(", "),
                omnidev_core::event::format_duration(debounce)
            )
        });
        watchers.push(watcher);
    }
    let supervisor = supervisor.clone();
    tokio::spawn(async move {
        while let Some(service) = rx.recv().await {
            let mut services = vec![service];
            // Rules firing together are one reload.
            while let Ok(more) = rx.try_recv() {
                if !services.contains(&more) {
                    services.push(more);
                }
            }
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            // Fails only once the supervisor has shut down.
            if supervisor.reload(&names).await.is_err() {
                return;
            }
        }
    });
    Ok((watchers, notices))
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Instant;

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
        root: PathBuf,
        rx: mpsc::Receiver<Vec<PathBuf>>,
        _watcher: Watcher,
    }

    fn fixture(debounce_ms: u64) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("omnigent/api/__pycache__")).expect("mkdir");
        std::fs::create_dir_all(root.join("omnigent/generated")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "omnigent/generated/\n*_local.py\n")
            .expect("gitignore");
        std::fs::write(root.join("omnigent/app.py"), "print('hi')\n").expect("write");
        let (tx, rx) = mpsc::channel();
        let watcher = Watcher::start(
            &WatchConfig {
                root: root.clone(),
                patterns: vec!["omnigent/**/*.py".to_owned()],
                debounce: Duration::from_millis(debounce_ms),
            },
            move |paths| {
                let _ = tx.send(paths);
            },
        )
        .expect("watcher");
        assert_eq!(watcher.watched(), [root.join("omnigent")]);
        Fixture {
            dir,
            root,
            rx,
            _watcher: watcher,
        }
    }

    impl Fixture {
        fn next_trigger(&self) -> Vec<PathBuf> {
            self.rx
                .recv_timeout(Duration::from_secs(20))
                .expect("a reload trigger within 20 s")
        }

        /// Proves that nothing was triggered before this point: a write to a
        /// fresh file must come back as the very next trigger, alone. inotify
        /// delivers events in order, so anything earlier would arrive first.
        fn assert_no_trigger_before_sentinel(&self) {
            let sentinel = self.root.join("omnigent/sentinel.py");
            std::fs::write(&sentinel, "x = 1\n").expect("sentinel");
            assert_eq!(self.next_trigger(), vec![sentinel]);
            assert!(self.dir.path().exists());
        }
    }

    #[test]
    fn one_write_is_one_trigger() {
        let fx = fixture(100);
        let file = fx.root.join("omnigent/app.py");
        std::fs::write(&file, "print('changed')\n").expect("write");
        assert_eq!(fx.next_trigger(), vec![file]);
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn twenty_writes_in_100ms_are_one_trigger() {
        // A generous debounce keeps the burst whole on a loaded machine.
        let fx = fixture(300);
        let file = fx.root.join("omnigent/api/routes.py");
        let started = Instant::now();
        for i in 0..20 {
            std::fs::write(&file, format!("n = {i}\n")).expect("write");
            std::thread::sleep(Duration::from_millis(5));
        }
        let burst = started.elapsed();
        assert_eq!(fx.next_trigger(), vec![file]);
        if burst < Duration::from_millis(300) {
            fx.assert_no_trigger_before_sentinel();
        }
    }

    #[test]
    fn reads_pycache_gitignored_and_other_files_do_not_trigger() {
        let fx = fixture(100);
        let mut content = String::new();
        std::fs::File::open(fx.root.join("omnigent/app.py"))
            .and_then(|mut f| f.read_to_string(&mut content))
            .expect("read");
        std::fs::write(
            fx.root.join("omnigent/api/__pycache__/app.cpython-311.pyc"),
            b"\0",
        )
        .expect("pyc");
        std::fs::write(fx.root.join("omnigent/api/__pycache__/x.py"), b"").expect("py in cache");
        std::fs::write(fx.root.join("omnigent/generated/schema.py"), b"").expect("ignored dir");
        std::fs::write(fx.root.join("omnigent/settings_local.py"), b"").expect("ignored file");
        std::fs::write(fx.root.join("omnigent/notes.txt"), b"").expect("not python");
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn remove_and_rename_trigger() {
        let fx = fixture(100);
        let file = fx.root.join("omnigent/app.py");
        let renamed = fx.root.join("omnigent/main.py");
        std::fs::rename(&file, &renamed).expect("rename");
        let paths = fx.next_trigger();
        assert!(paths.contains(&renamed), "{paths:?}");
        std::fs::remove_file(&renamed).expect("remove");
        assert_eq!(fx.next_trigger(), vec![renamed]);
    }

    #[test]
    fn literal_bases() {
        assert_eq!(literal_base("omnigent/**/*.py"), PathBuf::from("omnigent"));
        assert_eq!(literal_base("src/app/*.rs"), PathBuf::from("src/app"));
        assert_eq!(literal_base("**/*.py"), PathBuf::new());
        assert_eq!(literal_base("main.py"), PathBuf::new());
    }
}
