//! The dashboard's one page (`page.html`, embedded: no build step). It
//! shows what the server streams as text, never as HTML.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse as _, Response};

use super::Dashboard;

/// The page, with the secret for its requests put in at `{{TOKEN}}`.
const PAGE: &str = include_str!("page.html");

/// `GET /?token=`: the page (it holds the secret: never cached, never
/// framed, and it loads nothing from elsewhere).
pub(super) async fn page(State(state): State<Arc<Dashboard>>) -> Response {
    let page = PAGE
        .replace("{{TOKEN}}", &state.token)
        .replace("{{ALLOW_UP}}", if state.allow_up { "yes" } else { "no" });
    let mut response = page.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
        ),
    );
    response
}
