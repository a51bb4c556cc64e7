//! The syntax of service and port names: short, lower-case, and safe as a file name.
//!
//! A service's name becomes a file name (`<pod>/logs/<name>.log`), a prefix
//! on the terminal and a word in the control protocol, so it is held to a
//! conservative syntax wherever it enters omnidev: when a profile loads,
//! in control requests and in `omnidev logs`.

/// The rule, as error messages state it.
pub const NAME_SYNTAX: &str =
    "1 to 32 characters from `a-z`, `0-9`, `_` and `-`, starting with a letter or digit";

/// Longest name accepted.
pub const MAX_NAME: usize = 32;

/// Whether `name` is a valid service or port name
/// (`[a-z0-9][a-z0-9_-]{0,31}`).
///
/// ```
/// use omnidev_pod::names::is_valid;
/// assert!(is_valid("server") && is_valid("web-2") && is_valid("db_main"));
/// assert!(!is_valid("") && !is_valid("../x") && !is_valid("Web") && !is_valid("-x"));
/// assert!(!is_valid(&"a".repeat(33)));
/// ```
pub fn is_valid(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// Most replicas a service may have (`replicas`, `--scale`).
pub const MAX_REPLICAS: u32 = 64;

/// The name of replica `index` (from 1) of `service`: `web.2`. A dot is
/// never in a profile's names, so a replica's never meets another service's.
pub fn replica(service: &str, index: u32) -> String {
    format!("{service}.{index}")
}

/// The service and index of a replica's name (`web.2` → `("web", 2)`);
/// `None` for any other name.
///
/// ```
/// use omnidev_pod::names::replica_of;
/// assert_eq!(replica_of("web.2"), Some(("web", 2)));
/// assert_eq!(replica_of("web"), None);
/// assert_eq!(replica_of("web.02"), None);
/// assert_eq!(replica_of("web.65"), None);
/// assert_eq!(replica_of("../x.1"), None);
/// ```
pub fn replica_of(name: &str) -> Option<(&str, u32)> {
    let (service, index) = name.rsplit_once('.')?;
    let number: u32 = index.parse().ok()?;
    (is_valid(service)
        && !index.starts_with('0')
        && index.bytes().all(|b| b.is_ascii_digit())
        && (1..=MAX_REPLICAS).contains(&number))
    .then_some((service, number))
}

/// The services `names` stand for among the pod's `services`: each one
/// itself, except a service that runs as replicas, which stands for them
/// all (`web` → `web.1`, `web.2`, in their order). An unknown name stays,
/// for its caller to refuse.
///
/// ```
/// let services = ["web.1", "api", "web.2", "webx.1"].map(String::from);
/// let asked = ["web", "api", "nope"].map(String::from);
/// let expanded = omnidev_pod::names::expand(&asked, &services);
/// assert_eq!(expanded, ["web.1", "web.2", "api", "nope"]);
/// ```
pub fn expand(names: &[String], services: &[String]) -> Vec<String> {
    let replicas = |name: &String| -> Vec<String> {
        let of_name = |s: &&String| replica_of(s).is_some_and(|(of, _)| of == name);
        services.iter().filter(of_name).cloned().collect()
    };
    names
        .iter()
        .flat_map(|name| match replicas(name) {
            copies if services.contains(name) || copies.is_empty() => vec![name.clone()],
            copies => copies,
        })
        .collect()
}

/// Whether `name` names a running service: a valid name, a replica's
/// (`web.2`), or the watch of a linked pod's service (`backend.api`).
pub fn is_service(name: &str) -> bool {
    is_valid(name)
        || replica_of(name).is_some()
        || name.split_once('.').is_some_and(|(link, theirs)| is_valid(link) && is_valid(theirs))
}

/// A name that breaks [`NAME_SYNTAX`]: what it names and the name,
/// shown escaped (control characters in it reach no terminal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {shown}: use {NAME_SYNTAX}")]
pub struct BadName {
    /// What it names: `service name`, `port name`, …
    pub what: &'static str,
    /// The name as it may be shown: quoted, cut to 80 characters, escaped.
    pub shown: String,
}

/// [`check`] for the name of a running service, which may be a replica's.
pub fn check_service(name: &str) -> Result<(), BadName> {
    if is_service(name) { Ok(()) } else { check("service name", name) }
}

/// Names as an error lists them: `a, b`, or `none`.
///
/// ```
/// assert_eq!(omnidev_pod::names::listed(["a", "b"]), "a, b");
/// assert_eq!(omnidev_pod::names::listed(Vec::<String>::new()), "none");
/// ```
pub fn listed<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    let names: Vec<S> = names.into_iter().collect();
    if names.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    names.join(", ")
}

/// `Ok` for a valid name, else a [`BadName`] naming `what` (e.g. "service
/// name") and the rule.
///
/// ```
/// let err = omnidev_pod::names::check("service name", "../../x").unwrap_err().to_string();
/// assert!(err.contains("\"../../x\"") && err.contains("a-z"));
/// ```
pub fn check(what: &'static str, name: &str) -> Result<(), BadName> {
    if is_valid(name) { Ok(()) } else { Err(BadName { what, shown: shown(name) }) }
}

/// `value` quoted, cut to 80 characters and shown as core shows outside
/// text ([`omnidev_core::text::quote`]): safe to put in an error message.
pub(crate) fn shown(value: &str) -> String {
    let cut = omnidev_core::text::clip(value, 80);
    format!("\"{}\"", omnidev_core::text::quote(&cut))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hostile_name_is_shown_quoted_cut_and_never_obeyed() {
        let name = format!("x\x1b]0;title\x07\u{202e}\n{}", "y".repeat(200));
        let err = super::check("service name", &name).expect_err("an invalid name").to_string();
        assert!(!err.chars().any(omnidev_core::text::obeyed), "{err:?}");
        assert!(err.contains("\"x") && err.contains("…\""), "{err:?}");
        assert!(!err.contains(&"y".repeat(80)), "cut to 80 characters: {err:?}");
    }
}
