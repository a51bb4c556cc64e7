//! `{placeholder}` templates: `{pod}`, `{repo}`, `{port.NAME}`, `{host.NAME}`, `{env.NAME}`,
//! `{env.NAME:-DEFAULT}`, `{python}`.
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
use std::path::Path;

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
    parse_with(text, Some((ports, &[])))
}

/// [`parse`], with the declared database names for `{db.NAME.PART}`.
pub fn parse_known(
    text: &str,
    ports: &[&str],
    databases: &[&str],
) -> Result<Vec<Segment>, TemplateError> {
    parse_with(text, Some((ports, databases)))
}

/// The declared port and database names (`None`: any name).
type Declared<'k> = Option<(&'k [&'k str], &'k [&'k str])>;

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

fn placeholder(inner: &str, names: Declared<'_>) -> Result<Placeholder, String> {
    let ports = names.map(|(ports, _)| ports);
    let databases = names.map(|(_, databases)| databases);
    let known = || {
        let fixed = [
            "{pod}",
            "{repo}",
            "{python}",
            "{env.NAME}",
            "{env.NAME:-DEFAULT}",
        ];
        let all: Vec<String> = fixed
            .iter()
            .map(|p| (*p).to_owned())
            .chain(
                ports
                    .unwrap_or_default()
                    .iter()
                    .map(|p| format!("{{port.{p}}}, {{host.{p}}}")),
            )
            .chain(databases.unwrap_or_default().iter().map(|d| {
                format!(
                    "{{db.{d}.url}} (and .{})",
                    crate::database::PARTS[1..].join(", .")
                )
            }))
            .collect();
        format!("known placeholders: {}", all.join(", "))
    };
    let port_name = |name: &str| -> Result<String, String> {
        let Some(ports) = ports else {
            return Ok(name.to_owned());
        };
        if ports.contains(&name) {
            Ok(name.to_owned())
        } else {
            Err(format!(
                "unknown port `{name}` in placeholder `{{{inner}}}`: the [ports] table declares {}",
                if ports.is_empty() {
                    "none".to_owned()
                } else {
                    ports.join(", ")
                }
            ))
        }
    };
    match inner.split_once('.') {
        None if inner == "pod" => Ok(Placeholder::Pod),
        None if inner == "repo" => Ok(Placeholder::Repo),
        None if inner == "python" => Ok(Placeholder::Python),
        Some(("port", name)) => port_name(name).map(Placeholder::Port),
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
                    if databases.is_empty() {
                        "none".to_owned()
                    } else {
                        databases.join(", ")
                    }
                ));
            }
            Ok(Placeholder::Db {
                name: name.to_owned(),
                part: part.to_owned(),
            })
        }
        Some(("env", rest)) => {
            let (name, default) = match rest.split_once(":-") {
                Some((name, default)) => (name, Some(default.to_owned())),
                None => (rest, None),
            };
            if name.is_empty() {
                return Err(format!("`{{{inner}}}` names no variable; {}", known()));
            }
            Ok(Placeholder::Env {
                name: name.to_owned(),
                default,
            })
        }
        _ => Err(format!(
            "unknown placeholder `{{{inner}}}`; {}; a literal brace is written twice: \
             `{{{{{inner}}}}}` stands for `{{{inner}}}` (as in `sh -c 'echo ${{{{CODE:-0}}}}'`)",
            known()
        )),
    }
}

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
    /// `{env.NAME}`.
    pub env: &'a BTreeMap<String, String>,
    /// `{python}`, or why it cannot be known.
    pub python: Result<&'a str, &'a str>,
    /// `{db.NAME.PART}`: each database's parts.
    pub databases: &'a BTreeMap<String, crate::database::DbParts>,
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
}

/// Renders `text`. With `strict_env`, an unset `{env.NAME}` without a
/// default is [`Unresolved::Env`]; otherwise it renders as the empty string.
///
/// ```
/// use omnidev_pod::profile::template::{render, Values};
/// let mut ports = omnidev_pod::Ports::default();
/// ports.0.insert("web".into(), 8080);
/// let (hosts, env) = Default::default();
/// let databases = Default::default();
/// let values = Values { pod: "/p".as_ref(), repo: "/r".as_ref(), ports: &ports, hosts: &hosts, env: &env, python: Ok("3.12"), databases: &databases };
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
            Segment::Placeholder(Placeholder::Host(name)) => {
                out.push_str(values.hosts.get(&name).map_or("127.0.0.1", String::as_str));
            }
            Segment::Placeholder(Placeholder::Db { name, part }) => {
                let value = values
                    .databases
                    .get(&name)
                    .and_then(|parts| parts.get(&part));
                out.push_str(value.ok_or(Unresolved::Db(format!("{name}.{part}")))?);
            }
            Segment::Placeholder(Placeholder::Python) => match values.python {
                Ok(version) => out.push_str(version),
                Err(reason) => return Err(Unresolved::Python(reason.to_owned())),
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
                Segment::Placeholder(Placeholder::Env {
                    name: "HOME".into(),
                    default: None
                }),
                Segment::Literal("/{lit}".into()),
            ]
        );
    }

    #[test]
    fn database_placeholders_name_a_declared_database_and_a_part() {
        let segs = parse_known("{db.main.url}", &[], &["main"]).expect("parse");
        assert_eq!(
            segs,
            [Segment::Placeholder(Placeholder::Db {
                name: "main".into(),
                part: "url".into()
            })]
        );
        let err = parse_known("{db.other.url}", &[], &["main"]).expect_err("unknown");
        assert!(err.message.contains("declares main"), "{}", err.message);
        let err = parse_known("{db.main.colour}", &[], &["main"]).expect_err("part");
        assert!(
            err.message.contains("unknown part `colour`"),
            "{}",
            err.message
        );
        assert!(parse_known("{db.main}", &[], &["main"]).is_err());
    }

    #[test]
    fn errors_carry_offsets() {
        let err = parse("abc{port.nope}", &["web"]).expect_err("unknown port");
        assert_eq!(err.offset, 3);
        assert_eq!(err.snippet, "{port.nope}");
        assert!(
            parse("x{pod", &[])
                .expect_err("unclosed")
                .message
                .contains("unclosed")
        );
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
        let values = Values {
            pod: Path::new("/p"),
            repo: Path::new("/r"),
            ports: &ports,
            hosts: &hosts,
            env: &env,
            python: Err("bad .python-version"),
            databases: &databases,
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
            Err(Unresolved::Python("bad .python-version".into()))
        );
        let pinned = Values {
            python: Ok("3.13"),
            ..values
        };
        assert_eq!(
            render("--python {python}", &pinned, false),
            Ok("--python 3.13".into())
        );
        assert_eq!(
            render("a{env.NOPE}b", &values, true),
            Err(Unresolved::Env("NOPE".into()))
        );
        // A default stands in for an unset or empty variable, strict or not.
        assert_eq!(render("{env.NOPE:-d:x}", &values, true), Ok("d:x".into()));
        let set: BTreeMap<String, String> =
            [("E".into(), String::new()), ("V".into(), "v".into())].into();
        let with = Values {
            env: &set,
            ..values
        };
        assert_eq!(
            render("{env.E:-d}/{env.V:-d}/{env.E}", &with, true),
            Ok("d/v/".into())
        );
        assert!(parse("{env.:-x}", &[]).is_err());
        assert_eq!(
            render("{port.x}", &values, true),
            Err(Unresolved::Port("x".into()))
        );
    }
}
