//! `{placeholder}` templates: `{pod}`, `{repo}`, `{port.NAME}`, `{host.NAME}`, `{env.NAME}`,
//! `{env.NAME:-DEFAULT}`, `{python}`, `{db.NAME.PART}`, and a linked pod's
//! `{link.NAME.port.PORT}`, `{link.NAME.url.URL}`, `{link.NAME.db.DB.PART}`,
//! `{link.NAME.repo}`, `{link.NAME.pod}`.
//!
//! `{env.NAME}` reads the inherited environment overlaid with the pod's
//! `env-files`; unset, it is an error when the pod is rendered (with the
//! line and column where it is written), except in a `[[seed]] from` list,
//! where it skips that candidate. `{env.NAME:-DEFAULT}` renders DEFAULT
//! (literal text, no placeholders) when NAME is unset or empty, as in a
//! POSIX shell.
//!
//! `{{` and `}}` stand for literal braces. Anything else inside braces is an
//! error, reported by the profile parser with line and column.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Ports;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Literal text.
    Literal(String),
    /// A placeholder.
    Placeholder(Placeholder),
}

/// A placeholder and what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placeholder {
    /// `{pod}`: the pod directory.
    Pod,
    /// `{repo}`: the checkout root.
    Repo,
    /// `{port.NAME}`: an allocated port.
    Port(String),
    /// `{host.NAME}`: the bind host for port NAME (default `127.0.0.1`).
    Host(String),
    /// `{host.pod}`: the pod's own host name under `localhost`
    /// ([`crate::root::pod_host`]).
    PodHost,
    /// `{env.NAME}` or `{env.NAME:-DEFAULT}`: a variable of the inherited
    /// environment (overlaid with the pod's env files).
    Env {
        /// The variable.
        name: String,
        /// What to render when it is unset or empty; `None`: unset is an error.
        default: Option<String>,
    },
    /// `{python}`: the checkout's pinned Python version (see
    /// [`crate::python`]).
    Python,
    /// `{db.NAME.PART}`: a part of a database of the pod (its `url`,
    /// `port`… see [`crate::database::PARTS`]).
    Db {
        /// The database.
        name: String,
        /// The part.
        part: String,
    },
    /// `{link.NAME.…}`: something of the pod of a linked checkout
    /// ([`crate::link`]).
    Link {
        /// The link's name (`[links.NAME]`).
        link: String,
        /// What of its pod.
        what: LinkPart,
    },
}

/// What a `{link.NAME.…}` placeholder takes from the linked pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkPart {
    /// `.repo`: its checkout.
    Repo,
    /// `.pod`: its pod directory.
    Pod,
    /// `.port.PORT`: one of its ports.
    Port(String),
    /// `.url.URL`: one of its `[urls]`.
    Url(String),
    /// `.db.DB.PART`: a part of one of its databases.
    Db {
        /// The database.
        name: String,
        /// The part.
        part: String,
    },
}

/// A template error: where in the string (byte offset of the offending
/// `{`, `}`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Byte offset into the template string.
    pub offset: usize,
    /// The placeholder text as written, including braces, when there is one.
    pub snippet: String,
    /// What is wrong.
    pub message: String,
}

/// Parses `text` into segments. `ports` are the declared port names; a
/// `{port.X}` or `{host.X}` for another name is an error.
///
/// ```
/// use omnidev_pod::profile::template::{parse, Segment, Placeholder};
/// let segs = parse("http://{host.web}:{port.web}/{{x}}", &["web"]).unwrap();
/// assert_eq!(segs[1], Segment::Placeholder(Placeholder::Host("web".into())));
/// assert!(parse("{nope}", &["web"]).is_err());
/// ```
pub fn parse(text: &str, ports: &[&str]) -> Result<Vec<Segment>, TemplateError> {
    let known = Names { ports, databases: &[], links: &[] };
    parse_with(text, Some(&known))
}

/// [`parse`], with the declared database and link names too.
pub fn parse_known(text: &str, known: &Names<'_>) -> Result<Vec<Segment>, TemplateError> {
    parse_with(text, Some(known))
}

/// The names a profile declares, which its placeholders may use: ports (a
/// server database's among them), databases, links.
#[derive(Debug, Clone, Copy)]
pub struct Names<'k> {
    /// `[ports]` names.
    pub ports: &'k [&'k str],
    /// `[databases]` names.
    pub databases: &'k [&'k str],
    /// `[links]` names.
    pub links: &'k [&'k str],
}

/// The declared names (`None`: any name).
type Declared<'k> = Option<&'k Names<'k>>;

/// Parses `text` against `known` names.
fn parse_with(text: &str, known: Declared<'_>) -> Result<Vec<Segment>, TemplateError> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(i) = rest.find(['{', '}']) {
        literal.push_str(&rest[..i]);
        let brace = &rest[i..];
        let at = offset + i;
        if brace.starts_with("{{") || brace.starts_with("}}") {
            literal.push_str(&brace[..1]);
            rest = &brace[2..];
            offset = at + 2;
            continue;
        }
        if brace.starts_with('}') {
            return Err(TemplateError {
                offset: at,
                snippet: "}".into(),
                message: "unmatched `}` (write `}}` for a literal brace)".into(),
            });
        }
        let Some(end) = brace.find('}') else {
            return Err(TemplateError {
                offset: at,
                snippet: brace.to_owned(),
                message: "unclosed `{` (write `{{` for a literal brace)".into(),
            });
        };
        let inner = &brace[1..end];
        let snippet = &brace[..=end];
        let placeholder = placeholder(inner, known).map_err(|message| TemplateError {
            offset: at,
            snippet: snippet.to_owned(),
            message,
        })?;
        if !literal.is_empty() {
            segments.push(Segment::Literal(std::mem::take(&mut literal)));
        }
        segments.push(Segment::Placeholder(placeholder));
        rest = &brace[end + 1..];
        offset = at + end + 1;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

/// The placeholders `names` allow, for an error that names them.
fn known_placeholders(names: Declared<'_>) -> String {
    let fixed = ["{pod}", "{repo}", "{python}", "{env.NAME}", "{env.NAME:-DEFAULT}"];
    let ports = names.map(|n| n.ports).unwrap_or_default();
    let databases = names.map(|n| n.databases).unwrap_or_default();
    let links = names.map(|n| n.links).unwrap_or_default();
    let all: Vec<String> =
        (fixed.iter().map(|p| (*p).to_owned()))
            .chain(ports.iter().map(|p| format!("{{port.{p}}}, {{host.{p}}}")))
            .chain(databases.iter().map(|d| {
                format!("{{db.{d}.url}} (and .{})", crate::database::PARTS[1..].join(", ."))
            }))
            .chain(links.iter().map(|l| {
                format!(
                    "{{link.{l}.port.PORT}}, {{link.{l}.url.URL}}, {{link.{l}.db.DB.PART}}, \
                 {{link.{l}.repo}}, {{link.{l}.pod}}"
                )
            }))
            .collect();
    format!("known placeholders: {}", all.join(", "))
}

fn placeholder(inner: &str, names: Declared<'_>) -> Result<Placeholder, String> {
    let ports = names.map(|n| n.ports);
    let databases = names.map(|n| n.databases);
    let links = names.map(|n| n.links);
    let known = || known_placeholders(names);
    let port_name = |name: &str| -> Result<String, String> {
        let Some(ports) = ports else {
            return Ok(name.to_owned());
        };
        if ports.contains(&name) {
            Ok(name.to_owned())
        } else {
            Err(format!(
                "unknown port `{name}` in placeholder `{{{inner}}}`: the [ports] table declares {}",
                crate::names::listed(ports.iter())
            ))
        }
    };
    match inner.split_once('.') {
        None if inner == "pod" => Ok(Placeholder::Pod),
        None if inner == "repo" => Ok(Placeholder::Repo),
        None if inner == "python" => Ok(Placeholder::Python),
        Some(("port", name)) => port_name(name).map(Placeholder::Port),
        Some(("host", "pod")) => Ok(Placeholder::PodHost),
        Some(("host", name)) => port_name(name).map(Placeholder::Host),
        Some(("db", rest)) => {
            let Some((name, part)) = rest.rsplit_once('.') else {
                return Err(format!(
                    "`{{{inner}}}` names no part: write `{{db.NAME.url}}`; {}",
                    known()
                ));
            };
            if !crate::database::PARTS.contains(&part) {
                return Err(format!(
                    "unknown part `{part}` in `{{{inner}}}`: a database has {}",
                    crate::database::PARTS.join(", ")
                ));
            }
            if let Some(databases) = databases
                && !databases.contains(&name)
            {
                return Err(format!(
                    "unknown database `{name}` in `{{{inner}}}`: the [databases] table declares {}",
                    crate::names::listed(databases.iter())
                ));
            }
            Ok(Placeholder::Db { name: name.to_owned(), part: part.to_owned() })
        }
        Some(("link", rest)) => link_placeholder(inner, rest, links),
        Some(("env", rest)) => {
            let (name, default) = match rest.split_once(":-") {
                Some((name, default)) => (name, Some(default.to_owned())),
                None => (rest, None),
            };
            if name.is_empty() {
                return Err(format!("`{{{inner}}}` names no variable; {}", known()));
            }
            Ok(Placeholder::Env { name: name.to_owned(), default })
        }
        _ => Err(format!(
            "unknown placeholder `{{{inner}}}`; {}; a literal brace is written twice: \
             `{{{{{inner}}}}}` stands for `{{{inner}}}` (as in `sh -c 'echo ${{{{CODE:-0}}}}'`)",
            known()
        )),
    }
}

/// `{link.NAME.…}` (`rest` is what follows `link.`): a declared link
/// (when `links` says which), and a part a pod has. The linked pod's own
/// names are checked when it is rendered, against that pod.
fn link_placeholder(
    inner: &str,
    rest: &str,
    links: Option<&[&str]>,
) -> Result<Placeholder, String> {
    let parts = "`.port.PORT`, `.url.URL`, `.db.DB.PART`, `.repo` or `.pod`";
    let (link, what) = rest
        .split_once('.')
        .ok_or_else(|| format!("`{{{inner}}}` names nothing of the linked pod: add {parts}"))?;
    if let Some(links) = links
        && !links.contains(&link)
    {
        return Err(format!(
            "unknown link `{link}` in `{{{inner}}}`: the [links] table declares {}",
            crate::names::listed(links.iter())
        ));
    }
    let what = match what.split_once('.') {
        None if what == "repo" => LinkPart::Repo,
        None if what == "pod" => LinkPart::Pod,
        Some(("port", port)) if !port.is_empty() => LinkPart::Port(port.to_owned()),
        Some(("url", url)) if !url.is_empty() => LinkPart::Url(url.to_owned()),
        Some(("db", db)) => match db.rsplit_once('.') {
            Some((name, part)) if crate::database::PARTS.contains(&part) && !name.is_empty() => {
                LinkPart::Db { name: name.to_owned(), part: part.to_owned() }
            }
            _ => {
                return Err(format!(
                    "`{{{inner}}}` names no database part: write `{{link.{link}.db.DB.PART}}`, \
                     PART one of {}",
                    crate::database::PARTS.join(", ")
                ));
            }
        },
        _ => return Err(format!("`{{{inner}}}`: a linked pod has {parts}")),
    };
    Ok(Placeholder::Link { link: link.to_owned(), what })
}

/// A linked checkout's pod, as this pod's placeholders see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Linked {
    /// The linked checkout's root.
    pub checkout: PathBuf,
    /// Its pod directory.
    pub pod_dir: PathBuf,
    /// Its ports (`pod.toml`).
    pub ports: Ports,
    /// Its `[urls]`, rendered with its ports.
    pub urls: BTreeMap<String, String>,
    /// Each of its databases' parts (those it has made).
    pub databases: BTreeMap<String, crate::database::DbParts>,
}

impl Linked {
    /// What `{link.LINK.WHAT}` stands for, or why the pod cannot say.
    pub fn part(&self, what: &LinkPart) -> std::result::Result<String, String> {
        let pod = self.pod_dir.display();
        match what {
            LinkPart::Repo => Ok(self.checkout.to_string_lossy().into_owned()),
            LinkPart::Pod => Ok(self.pod_dir.to_string_lossy().into_owned()),
            LinkPart::Port(port) => self.ports.get(port).map(|p| p.to_string()).ok_or_else(|| {
                format!(
                    "its pod {pod} has no port `{port}` (it has {})",
                    crate::names::listed(self.ports.0.keys())
                )
            }),
            LinkPart::Url(url) => self.urls.get(url).cloned().ok_or_else(|| {
                format!(
                    "its profile has no URL `{url}` (it has {})",
                    crate::names::listed(self.urls.keys())
                )
            }),
            LinkPart::Db { name, part } => (self.databases.get(name))
                .and_then(|parts| parts.get(part))
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "its pod has no database `{name}` made yet (it has {}); start it once",
                        crate::names::listed(self.databases.keys())
                    )
                }),
        }
    }
}

/// The line `omnidev link-watch` prints once the linked service is ready
/// (the readiness probe of the watch, `LINK.SERVICE`, matches it).
pub const LINK_READY: &str = "ready";

/// The values placeholders stand for.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// `{pod}`.
    pub pod: &'a Path,
    /// `{repo}`.
    pub repo: &'a Path,
    /// `{port.NAME}`.
    pub ports: &'a crate::Ports,
    /// `{host.NAME}`; names absent here are `127.0.0.1`.
    pub hosts: &'a BTreeMap<String, String>,
    /// `{host.pod}`.
    pub pod_host: &'a str,
    /// `{env.NAME}`.
    pub env: &'a BTreeMap<String, String>,
    /// `{python}`, or why it cannot be known.
    pub python: Result<&'a str, &'a crate::python::BadPin>,
    /// `{db.NAME.PART}`: each database's parts.
    pub databases: &'a BTreeMap<String, crate::database::DbParts>,
    /// `{link.NAME.…}`: each link's pod.
    pub links: &'a BTreeMap<String, Linked>,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// `{env.NAME}` with NAME unset and no default (only reported when
    /// asked to be strict).
    Env(String),
    /// `{port.NAME}` with no allocated port NAME.
    Port(String),
    /// A syntax error (see [`TemplateError`]).
    Syntax(String),
    /// `{python}` when `.python-version` cannot give a version: why.
    Python(String),
    /// `{db.NAME.PART}` of a database the pod does not have.
    Db(String),
    /// `{link.NAME.…}` that the linked pod cannot give: which link, why.
    Link {
        /// The link.
        link: String,
        /// Why.
        why: String,
    },
}

/// Renders `text`. With `strict_env`, an unset `{env.NAME}` without a
/// default is [`Unresolved::Env`]; otherwise it renders as the empty string.
///
/// ```
/// use omnidev_pod::profile::template::{render, Values};
/// let mut ports = omnidev_pod::Ports::default();
/// ports.0.insert("web".into(), 8080);
/// let (hosts, env) = Default::default();
/// let (databases, links) = Default::default();
/// let values = Values { pod: "/p".as_ref(), repo: "/r".as_ref(), ports: &ports, hosts: &hosts, pod_host: "main.r.localhost", env: &env, python: Ok("3.12"), databases: &databases, links: &links };
/// assert_eq!(render("{repo}:{host.web}:{port.web}", &values, false).unwrap(), "/r:127.0.0.1:8080");
/// ```
pub fn render(text: &str, values: &Values<'_>, strict_env: bool) -> Result<String, Unresolved> {
    // Port names are validated when the profile is parsed; here any name is
    // accepted so that a missing port is reported as such.
    let segments = parse_with(text, None).map_err(|e| Unresolved::Syntax(e.message))?;
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Literal(s) => out.push_str(&s),
            Segment::Placeholder(Placeholder::Pod) => out.push_str(&values.pod.to_string_lossy()),
            Segment::Placeholder(Placeholder::Repo) => out.push_str(&values.repo.to_string_lossy()),
            Segment::Placeholder(Placeholder::Port(name)) => {
                let port = values.ports.get(&name).ok_or(Unresolved::Port(name))?;
                out.push_str(&port.to_string());
            }
            Segment::Placeholder(Placeholder::PodHost) => out.push_str(values.pod_host),
            Segment::Placeholder(Placeholder::Host(name)) => {
                out.push_str(values.hosts.get(&name).map_or("127.0.0.1", String::as_str));
            }
            Segment::Placeholder(Placeholder::Db { name, part }) => {
                let value = values.databases.get(&name).and_then(|parts| parts.get(&part));
                out.push_str(value.ok_or(Unresolved::Db(format!("{name}.{part}")))?);
            }
            Segment::Placeholder(Placeholder::Link { link, what }) => {
                let Some(linked) = values.links.get(&link) else {
                    let why = "was not resolved".to_owned();
                    return Err(Unresolved::Link { link, why });
                };
                match linked.part(&what) {
                    Ok(value) => out.push_str(&value),
                    Err(why) => return Err(Unresolved::Link { link, why }),
                }
            }
            Segment::Placeholder(Placeholder::Python) => match values.python {
                Ok(version) => out.push_str(version),
                Err(reason) => return Err(Unresolved::Python(reason.to_string())),
            },
            Segment::Placeholder(Placeholder::Env { name, default }) => {
                match (values.env.get(&name), default) {
                    (Some(v), Some(default)) if v.is_empty() => out.push_str(&default),
                    (Some(v), _) => out.push_str(v),
                    (None, Some(default)) => out.push_str(&default),
                    (None, None) if strict_env => return Err(Unresolved::Env(name)),
                    (None, None) => {}
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_escapes() {
        let segs = parse("{pod}/{repo}/{env.HOME}/{{lit}}", &[]).expect("parse");
        assert_eq!(
            segs,
            vec![
                Segment::Placeholder(Placeholder::Pod),
                Segment::Literal("/".into()),
                Segment::Placeholder(Placeholder::Repo),
                Segment::Literal("/".into()),
                Segment::Placeholder(Placeholder::Env { name: "HOME".into(), default: None }),
                Segment::Literal("/{lit}".into()),
            ]
        );
    }

    #[test]
    fn link_placeholders_name_a_declared_link_and_a_part() {
        let known = Names { ports: &[], databases: &[], links: &["api"] };
        let link = |what| [Segment::Placeholder(Placeholder::Link { link: "api".into(), what })];
        let parsed = |text: &str| parse_known(text, &known);
        assert_eq!(
            parsed("{link.api.port.server}").expect("port"),
            link(LinkPart::Port("server".into()))
        );
        assert_eq!(parsed("{link.api.url.ui}").expect("url"), link(LinkPart::Url("ui".into())));
        assert_eq!(
            parsed("{link.api.db.main.url}").expect("db"),
            link(LinkPart::Db { name: "main".into(), part: "url".into() })
        );
        assert_eq!(parsed("{link.api.repo}").expect("repo"), link(LinkPart::Repo));
        assert_eq!(parsed("{link.api.pod}").expect("pod"), link(LinkPart::Pod));
        let err = parsed("{link.web.port.server}").expect_err("undeclared");
        assert!(err.message.contains("declares api"), "{}", err.message);
        for bad in ["{link.api}", "{link.api.port}", "{link.api.db.main}", "{link.api.colour}"] {
            let err = parsed(bad).expect_err(bad);
            assert!(
                err.message.contains("`.port.PORT`") || err.message.contains("PART"),
                "{bad}: {}",
                err.message
            );
        }
    }

    #[test]
    fn database_placeholders_name_a_declared_database_and_a_part() {
        let known = Names { ports: &[], databases: &["main"], links: &[] };
        let parse_known = |text: &str, _: &[&str], _: &[&str]| parse_known(text, &known);
        let segs = parse_known("{db.main.url}", &[], &["main"]).expect("parse");
        assert_eq!(
            segs,
            [Segment::Placeholder(Placeholder::Db { name: "main".into(), part: "url".into() })]
        );
        let err = parse_known("{db.other.url}", &[], &["main"]).expect_err("unknown");
        assert!(err.message.contains("declares main"), "{}", err.message);
        let err = parse_known("{db.main.colour}", &[], &["main"]).expect_err("part");
        assert!(err.message.contains("unknown part `colour`"), "{}", err.message);
        assert!(parse_known("{db.main}", &[], &["main"]).is_err());
    }

    #[test]
    fn errors_carry_offsets() {
        let err = parse("abc{port.nope}", &["web"]).expect_err("unknown port");
        assert_eq!(err.offset, 3);
        assert_eq!(err.snippet, "{port.nope}");
        assert!(parse("x{pod", &[]).expect_err("unclosed").message.contains("unclosed"));
        assert_eq!(parse("ab}", &[]).expect_err("lone").offset, 2);
    }

    #[test]
    fn env_strictness() {
        let ports = crate::Ports::default();
        let (hosts, env) = (BTreeMap::new(), BTreeMap::new());
        let databases = BTreeMap::from([(
            "main".to_owned(),
            crate::database::DbParts::from([("url".to_owned(), "postgresql://u@/main".to_owned())]),
        )]);
        let bad_pin = crate::python::BadPin::NotAVersion {
            path: "/r/.python-version".into(),
            shown: "x y".into(),
        };
        let values = Values {
            pod: Path::new("/p"),
            repo: Path::new("/r"),
            ports: &ports,
            hosts: &hosts,
            pod_host: "main.r.localhost",
            env: &env,
            python: Err(&bad_pin),
            databases: &databases,
            links: &BTreeMap::new(),
        };
        assert_eq!(
            render("url={db.main.url}", &values, true).expect("a database"),
            "url=postgresql://u@/main"
        );
        assert_eq!(
            render("{db.other.url}", &values, true),
            Err(Unresolved::Db("other.url".into()))
        );
        assert_eq!(render("a{env.NOPE}b", &values, false), Ok("ab".into()));
        assert_eq!(
            render("uv run --python {python}", &values, false),
            Err(Unresolved::Python(bad_pin.to_string()))
        );
        let pinned = Values { python: Ok("3.13"), ..values };
        assert_eq!(render("--python {python}", &pinned, false), Ok("--python 3.13".into()));
        assert_eq!(render("a{env.NOPE}b", &values, true), Err(Unresolved::Env("NOPE".into())));
        // A default stands in for an unset or empty variable, strict or not.
        assert_eq!(render("{env.NOPE:-d:x}", &values, true), Ok("d:x".into()));
        let set: BTreeMap<String, String> =
            [("E".into(), String::new()), ("V".into(), "v".into())].into();
        let with = Values { env: &set, ..values };
        assert_eq!(render("{env.E:-d}/{env.V:-d}/{env.E}", &with, true), Ok("d/v/".into()));
        assert!(parse("{env.:-x}", &[]).is_err());
        assert_eq!(render("{port.x}", &values, true), Err(Unresolved::Port("x".into())));
    }
}
