//! Which events and paths count: content changes of files a rule
//! matches, `__pycache__` and gitignored files aside; the list of matching
//! files kept so a directory that goes away counts by what it held.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::overrides::{Override, OverrideBuilder};
use notify::EventKind;
use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};

use super::ignores;
use super::{Decisions, Message, Seen, WatchConfig};
use crate::error::{Error, Result};

/// Whether an event kind is a content change.
pub(super) fn kind_counts(kind: EventKind) -> bool {
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

/// Whether an event leaves its file whole: closed after writing, renamed
/// (a rename is atomic: an editor's save into place), or removed. A
/// creation or a write may be followed by more writes to the same file.
pub(super) fn kind_completes(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Remove(_)
    )
}

/// Whether an event may bring a directory (and its files) into view.
pub(super) fn kind_brings_in(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(CreateKind::Folder | CreateKind::Any | CreateKind::Other)
            | EventKind::Modify(ModifyKind::Name(
                RenameMode::To | RenameMode::Both | RenameMode::Any | RenameMode::Other
            ))
    )
}

pub(super) fn in_pycache(path: &Path) -> bool {
    path.components().any(|c| c == Component::Normal("__pycache__".as_ref()))
}

/// Decides which paths count, and remembers the matching files under the
/// watched bases (ignored or not), so a directory that goes away is known
/// to have held some.
pub(super) struct Tracker {
    pub(super) root: PathBuf,
    pub(super) bases: Vec<PathBuf>,
    pub(super) wanted: Override,
    /// The checkout's rules, shared with its other watchers.
    pub(super) ignores: Arc<ignores::RepoIgnores>,
    pub(super) known: BTreeSet<PathBuf>,
    pub(super) max_dirs: usize,
    pub(super) decisions: Option<Decisions>,
    pub(super) seen: Option<Seen>,
}

/// The files `patterns` (gitignore-style, relative to `root`) select.
pub(super) fn wanted(root: &Path, patterns: &[String]) -> Result<Override> {
    let glob_error = |pattern: &str, source: ignore::Error| Error::WatchPattern {
        pattern: pattern.to_owned(),
        source,
    };
    let mut wanted = OverrideBuilder::new(root);
    for pattern in patterns {
        wanted.add(pattern).map_err(|e| glob_error(pattern, e))?;
    }
    wanted.build().map_err(|e| glob_error("", e))
}

/// The most directories [`matches_a_file`] looks through.
pub(super) const MATCH_CHECK_DIRS: usize = 20_000;

/// Whether a file under `root` matches `patterns` as a watcher would
/// count it (`__pycache__` aside), looking through at most
/// [`MATCH_CHECK_DIRS`] directories: for `profile check`'s warning on a
/// watch rule that can never fire.
pub fn matches_a_file(root: &Path, patterns: &[String]) -> Result<bool> {
    let wanted = wanted(root, patterns)?;
    let mut found = false;
    ignores::walk(root, MATCH_CHECK_DIRS, &mut |path, is_dir| {
        if !found
            && !is_dir
            && let Ok(relative) = path.strip_prefix(root)
        {
            found = !in_pycache(relative)
                && matches!(wanted.matched(relative, false), Match::Whitelist(_));
        }
    });
    Ok(found)
}

/// The changes of one burst, collected.
#[derive(Debug, Default)]
pub(super) struct Burst {
    pub(super) changed: BTreeSet<PathBuf>,
    /// The changed files whose last event may be followed by more writes
    /// (see [`kind_completes`]).
    pub(super) writing: BTreeSet<PathBuf>,
    pub(super) appeared: Vec<PathBuf>,
    pub(super) lost: Option<String>,
    pub(super) gave_up: Option<String>,
    /// The message just taken counted (see [`Tracker::take`]).
    pub(super) counted: bool,
    /// A change of this burst has been told to [`Tracker::seen`].
    pub(super) told: bool,
}

impl Burst {
    /// Every change of the burst is whole: each file closed, renamed or
    /// removed, no directory still to scan, nothing lost.
    pub(super) fn settled(&self) -> bool {
        self.writing.is_empty()
            && self.appeared.is_empty()
            && self.lost.is_none()
            && self.gave_up.is_none()
    }
}

impl Tracker {
    pub(super) fn new(
        config: &WatchConfig,
        root: &Path,
        bases: Vec<PathBuf>,
        decisions: Option<Decisions>,
    ) -> Result<Self> {
        let wanted = wanted(root, &config.patterns)?;
        let mut tracker = Self {
            root: root.to_path_buf(),
            ignores: ignores::RepoIgnores::of(root, &bases, config.excludes_file.clone()),
            bases,
            wanted,
            known: BTreeSet::new(),
            max_dirs: config.max_watches,
            decisions,
            seen: None,
        };
        tracker.list_known();
        Ok(tracker)
    }

    /// Reads the ignore rules and the list of matching files again.
    pub(super) fn reread(&mut self) {
        self.ignores.reread(std::time::Instant::now());
        self.list_known();
    }

    /// Lists the matching files under the bases.
    pub(super) fn list_known(&mut self) {
        let mut known = BTreeSet::new();
        for base in &self.bases {
            ignores::walk(base, self.max_dirs, &mut |path, is_dir| {
                if !is_dir && self.is_wanted(path) {
                    known.insert(path.to_path_buf());
                }
            });
        }
        self.known = known;
    }

    /// The globs match `path` as a file, and it is not under `__pycache__`.
    pub(super) fn is_wanted(&self, path: &Path) -> bool {
        let Ok(relative) = path.strip_prefix(&self.root) else {
            return false;
        };
        !in_pycache(relative) && matches!(self.wanted.matched(relative, false), Match::Whitelist(_))
    }

    pub(super) fn under_a_base(&self, path: &Path) -> bool {
        self.bases.iter().any(|base| path.starts_with(base))
    }

    /// Tells the decision about `path` to whoever asked (`--debug`).
    pub(super) fn decide(&self, path: &Path, kind: EventKind, verdict: &str) {
        if let Some(decisions) = &self.decisions {
            decisions(path, kind, verdict);
        }
    }

    /// A file that counts as changed, unless ignored.
    pub(super) fn changed(&self, path: &Path, kind: EventKind, burst: &mut Burst) {
        if self.ignores.current().is_ignored(path, false) {
            self.decide(path, kind, "does not count: ignored by git's ignore rules");
        } else {
            self.decide(path, kind, "counts");
            burst.changed.insert(path.to_path_buf());
            if kind_completes(kind) {
                burst.writing.remove(path);
            } else {
                burst.writing.insert(path.to_path_buf());
            }
            burst.counted = true;
            self.tell_seen(burst);
        }
    }

    /// Tells [`Tracker::seen`] of a change that counts, and whether it is
    /// the burst's first.
    pub(super) fn tell_seen(&self, burst: &mut Burst) {
        let first = !std::mem::replace(&mut burst.told, true);
        if let Some(seen) = &self.seen {
            seen(first);
        }
    }

    /// Takes one message into the burst; true if any of it counted (a file
    /// that counts, again or for the first time, a directory to scan, a
    /// loss, the watch limit).
    pub(super) fn take(&mut self, message: Message, burst: &mut Burst) -> bool {
        burst.counted = false;
        self.take_into(message, burst);
        burst.counted
    }

    pub(super) fn take_into(&mut self, message: Message, burst: &mut Burst) {
        let event = match message {
            Message::Lost(why) => {
                burst.lost.get_or_insert(why);
                burst.counted = true;
                self.tell_seen(burst);
                return;
            }
            Message::Limit(why) => {
                burst.gave_up.get_or_insert(why);
                burst.counted = true;
                return;
            }
            Message::Event(event) => event,
        };
        let kind = event.kind;
        // Rules read after this moment already know of this event's change.
        let seen = std::time::Instant::now();
        for path in &event.paths {
            if !path.starts_with(&self.root) {
                self.decide(path, kind, "does not count: outside the checkout");
                continue;
            }
            if in_pycache(path) {
                self.decide(path, kind, "does not count: under __pycache__");
                continue;
            }
            if self.ignores.current().is_source(path) {
                self.decide(path, kind, "an ignore file: its rules are read again");
                self.ignores.reread(seen);
                continue;
            }
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_dir() => {
                    if kind_brings_in(event.kind) && self.under_a_base(path) {
                        self.decide(path, kind, "a directory came in: its files count");
                        burst.appeared.push(path.clone());
                        burst.counted = true;
                    } else {
                        self.decide(path, kind, "does not count: a directory");
                    }
                }
                Ok(_) => {
                    if self.is_wanted(path) {
                        self.known.insert(path.clone());
                        self.changed(path, kind, burst);
                    } else {
                        self.decide(path, kind, "does not count: matches no watch glob");
                    }
                }
                // Gone: the file itself, or every known file it held.
                Err(_) => {
                    let held: Vec<PathBuf> = self
                        .known
                        .range(path.clone()..)
                        .take_while(|known| known.starts_with(path))
                        .cloned()
                        .collect();
                    for file in held {
                        self.known.remove(&file);
                        self.changed(&file, kind, burst);
                    }
                    if self.is_wanted(path) {
                        self.changed(path, kind, burst);
                    } else {
                        self.decide(path, kind, "does not count: matches no watch glob");
                    }
                }
            }
        }
    }

    /// Scans the directories that appeared in the burst (their watches
    /// exist by now): each matching file inside is a change.
    pub(super) fn scan_appeared(&mut self, burst: &mut Burst) {
        let mut found = Vec::new();
        let mut rules_changed = false;
        let seen = std::time::Instant::now();
        let rules = self.ignores.current();
        for dir in std::mem::take(&mut burst.appeared) {
            ignores::walk(&dir, self.max_dirs, &mut |path, is_dir| {
                if is_dir {
                    return;
                }
                rules_changed |= rules.is_source(path);
                if self.is_wanted(path) {
                    found.push(path.to_path_buf());
                }
            });
        }
        drop(rules);
        if rules_changed {
            self.ignores.reread(seen);
        }
        let kind = EventKind::Create(CreateKind::Any);
        for file in found {
            self.changed(&file, kind, burst);
            self.known.insert(file);
        }
    }
}

/// The directory a glob can only match under: its components up to the
/// first one holding a glob character.
pub(super) fn literal_base(pattern: &str) -> PathBuf {
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
