//! A Heroku `app.json`: the databases an app deploys on (its `addons`:
//! `heroku-postgresql` sets `DATABASE_URL`, `heroku-redis` `REDIS_URL`,
//! or `<AS>_URL` when the add-on says `as`) and the variables it is
//! configured with (`env`), for `omnidev init`.

use serde::Deserialize;

use crate::database::DbEngine;

#[derive(Debug, Default, Deserialize)]
struct AppManifest {
    #[serde(default)]
    addons: Vec<Addon>,
    #[serde(default)]
    env: indexmap::IndexMap<String, EnvEntry>,
}

/// `"heroku-postgresql"` or `{"plan": "heroku-postgresql:essential-0",
/// "as": "DATABASE"}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Addon {
    Plan(String),
    Table {
        plan: String,
        #[serde(default, rename = "as")]
        attached_as: Option<String>,
    },
}

/// `"value"` or `{"description": …, "value": …, "generator": …}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EnvEntry {
    Value(String),
    Table {
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        value: Option<String>,
    },
}

/// What init takes from an `app.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppJson {
    /// Each database add-on: its engine and the variable it sets.
    pub addons: Vec<(DbEngine, String)>,
    /// Each variable: its name and its value (else its description).
    pub env: Vec<(String, String)>,
}

/// Reads an `app.json`'s text.
///
/// ```
/// use omnidev_pod::database::DbEngine;
/// let app = omnidev_pod::init::app_json::parse(
///     r#"{"addons": ["heroku-postgresql", {"plan": "heroku-redis:mini", "as": "CACHE"}],
///         "env": {"SECRET_KEY": {"generator": "secret", "description": "Django's"}, "TIMES": "2"}}"#,
/// ).unwrap();
/// assert_eq!(app.addons, [(DbEngine::Postgres, "DATABASE_URL".to_owned()), (DbEngine::Redis, "CACHE_URL".to_owned())]);
/// assert_eq!(app.env[0], ("SECRET_KEY".to_owned(), "Django's".to_owned()));
/// ```
pub fn parse(text: &str) -> Result<AppJson, String> {
    let file: AppManifest = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let addons = (file.addons.iter())
        .filter_map(|addon| {
            let (plan, attached_as) = match addon {
                Addon::Plan(plan) => (plan, None),
                Addon::Table { plan, attached_as } => (plan, attached_as.as_deref()),
            };
            let service = plan.split(':').next().unwrap_or_default();
            let (engine, default) = match service {
                "heroku-postgresql" => (DbEngine::Postgres, "DATABASE_URL"),
                "heroku-redis" => (DbEngine::Redis, "REDIS_URL"),
                _ => return None,
            };
            let key = attached_as.map_or_else(|| default.to_owned(), |name| format!("{name}_URL"));
            Some((engine, key))
        })
        .collect();
    let env = (file.env.into_iter())
        .map(|(key, entry)| {
            let value = match entry {
                EnvEntry::Value(value) => value,
                EnvEntry::Table { description, value } => value.or(description).unwrap_or_default(),
            };
            (key, value)
        })
        .collect();
    Ok(AppJson { addons, env })
}
