//! The dashboard's security policy: one layer every request goes through,
//! whatever its route (a 404 or a 405 too).
//!
//! - Its `Host` must name this server (no DNS rebinding), its `Origin`,
//!   when it has one, this server too (no cross-site request).
//! - It must carry the secret: a GET in `?token=` (the URL the CLI prints;
//!   the page's own requests and event streams) or in `X-Omnidev-Token`,
//!   anything else in that header only, which no form or cross-site page
//!   can set. No cookie is read or set: a cookie is not bound to a port
//!   (RFC 6265 §8.5), so a browser would send it to every server on
//!   127.0.0.1.
//! - Only the proof of a challenge is answered without the secret (it
//!   tells nothing but that this server holds it).
//!
//! A connection whose request carried the secret is let in (counted
//! apart from strangers, see `door`); one refused stays a stranger.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use super::door::Visit;

/// The header that carries the secret.
pub const TOKEN_HEADER: &str = "x-omnidev-token";

/// Whom the dashboard serves.
#[derive(Debug)]
pub struct Policy {
    pub token: String,
    pub port: u16,
}

/// Why a request is refused (said in the 403's body).
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// Its `Host` is not this server (DNS rebinding).
    Host,
    /// Its `Origin` is another site.
    Origin,
    /// It carries no secret, or a wrong one.
    Token,
}

impl Denied {
    fn why(&self) -> &'static str {
        match self {
            Denied::Host => "this server answers to 127.0.0.1 and localhost only",
            Denied::Origin => "requests from other sites are refused",
            Denied::Token => {
                "open the URL `omnidev dashboard` printed (it carries the secret; \
                 each dashboard that starts makes a new one)"
            }
        }
    }
}

impl Policy {
    /// Whether a request may be served: see the module docs. `Ok(true)`
    /// when it carried the secret, `Ok(false)` when it needs none.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<bool, Denied> {
        let ours = |value: &str, scheme: &str| {
            [format!("{scheme}127.0.0.1:{}", self.port), format!("{scheme}localhost:{}", self.port)]
                .iter()
                .any(|own| own == value)
        };
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if !host.is_some_and(|host| ours(host, "")) {
            return Err(Denied::Host);
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !origin.to_str().is_ok_and(|o| ours(o, "http://"))
        {
            return Err(Denied::Origin);
        }
        if method == Method::GET && uri.path() == super::PROVE_PATH {
            return Ok(false);
        }
        let in_header = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok());
        let in_query = (method == Method::GET).then(|| token_in_query(uri.query())).flatten();
        let given = in_header.map(str::to_owned).or(in_query);
        if given.is_some_and(|given| same(given.as_bytes(), self.token.as_bytes())) {
            Ok(true)
        } else {
            Err(Denied::Token)
        }
    }
}

/// The layer: refuses what [`Policy::check`] refuses, lets the connection
/// in when the request carried the secret.
pub async fn guard(State(policy): State<Arc<Policy>>, request: Request, next: Next) -> Response {
    match policy.check(request.method(), request.uri(), request.headers()) {
        Err(refused) => super::text(StatusCode::FORBIDDEN, refused.why()),
        Ok(with_secret) => {
            if with_secret
                && let Some(visit) = request.extensions().get::<Arc<Visit>>()
                && !visit.let_in()
            {
                return super::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many pages are open on this dashboard",
                );
            }
            let mut response = next.run(request).await;
            // Nothing the page links to learns its URL (it holds the secret).
            let headers = response.headers_mut();
            headers
                .insert(header::REFERRER_POLICY, header::HeaderValue::from_static("no-referrer"));
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                header::HeaderValue::from_static("nosniff"),
            );
            response.into_response()
        }
    }
}

/// The secret in a query string (`token=…`; hex, so nothing to decode).
fn token_in_query(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| pair.strip_prefix("token=")).map(str::to_owned)
}

/// Whether `a` and `b` are equal, in a time that does not tell where they
/// differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        policy: &Policy,
        method: &Method,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> Result<bool, Denied> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                value.parse().expect("a value"),
            );
        }
        policy.check(method, &uri.parse().expect("a uri"), &map)
    }

    /// No secret, a wrong one, another Host or a foreign Origin: refused;
    /// an action's secret must come in its header; a cookie is no secret.
    #[test]
    fn requests_without_the_secret_or_from_elsewhere_are_refused() {
        let policy = Policy { token: "ab".repeat(32), port: 4321 };
        let token = policy.token.clone();
        let host = ("host", "127.0.0.1:4321");
        let header = (TOKEN_HEADER, token.as_str());
        let cookie = format!("omnidev-dashboard={token}");
        let get = |uri: &str, headers: &[(&str, &str)]| check(&policy, &Method::GET, uri, headers);
        assert_eq!(get("/", &[host]), Err(Denied::Token));
        assert_eq!(get("/?token=00", &[host]), Err(Denied::Token));
        assert_eq!(get(&format!("/?token={token}"), &[host]), Ok(true));
        assert_eq!(get(&format!("/api/events?pod=a&token={token}"), &[host]), Ok(true));
        assert_eq!(get("/api/pods", &[host, header]), Ok(true));
        assert_eq!(get("/api/pods", &[host, ("cookie", &cookie)]), Err(Denied::Token));
        assert_eq!(get("/api/pods", &[("host", "localhost:4321"), header]), Ok(true));
        // DNS rebinding: the browser names the attacker's host.
        assert_eq!(get("/api/pods", &[("host", "evil.example:4321"), header]), Err(Denied::Host));
        assert_eq!(get("/api/pods", &[header]), Err(Denied::Host));
        assert_eq!(
            get("/api/pods", &[host, header, ("origin", "http://evil.example")]),
            Err(Denied::Origin)
        );
        assert_eq!(
            get("/api/pods", &[host, header, ("origin", "http://127.0.0.1:4321")]),
            Ok(true)
        );
        // The proof needs no secret, but this server's Host.
        assert_eq!(get("/api/prove?challenge=00", &[host]), Ok(false));
        assert_eq!(
            get("/api/prove?challenge=00", &[("host", "evil.example:4321")]),
            Err(Denied::Host)
        );
        let post =
            |uri: &str, headers: &[(&str, &str)]| check(&policy, &Method::POST, uri, headers);
        assert_eq!(post("/api/act", &[host, ("cookie", &cookie)]), Err(Denied::Token));
        assert_eq!(post(&format!("/api/act?token={token}"), &[host]), Err(Denied::Token));
        assert_eq!(post("/api/act", &[host, header]), Ok(true));
        assert_eq!(post("/api/act", &[host, (TOKEN_HEADER, "ab")]), Err(Denied::Token));
        assert_eq!(post("/api/prove", &[host]), Err(Denied::Token));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
