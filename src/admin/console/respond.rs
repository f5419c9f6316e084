//! What every page answers with: an HTML response, an error page in the shell, and the
//! admin API asked from inside the console.

use serde_json::{json, Value};

use super::html::{self, Nav, Shell};
use super::state::Console;
use crate::admin::actor::Actor;
use crate::admin::http::{Request, Response};

/// An HTML page.
pub fn html_response(status: u16, body: String) -> Response {
    Response::text(status, "text/html; charset=utf-8", body)
}

/// A page telling what went wrong, in the page shell.
pub fn error_page(status: u16, message: &str, shell: &Shell<'_>) -> Response {
    let title = match status {
        400 => "Bad request",
        403 => "Not allowed",
        404 => "Not found",
        405 => "Method not allowed",
        _ => "Error",
    };
    let body = format!("<p class=\"error\">{}</p>", html::text(message, 2000));
    html_response(status, html::page(title, Nav::Key, shell, &body))
}

/// A request to the admin API made by the console itself.
pub fn internal(method: &str, path: &str, query: Vec<(String, String)>) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        query,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// The admin API's answer as JSON (`{"error": …}` when its body is not JSON), asked for the
/// console's own pages (as [`Actor::Console`]: reads, never actions).
pub async fn api(c: &Console, method: &str, path: &str, query: &[(&str, &str)]) -> (u16, Value) {
    api_as(c, &Actor::Console, method, path, query).await
}

/// The admin API's answer as JSON to a request made as `who` (an action of a session or a
/// bearer token: its token's name).
pub async fn api_as(
    c: &Console,
    who: &Actor,
    method: &str,
    path: &str,
    query: &[(&str, &str)],
) -> (u16, Value) {
    let q = query
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let r = c.state.handle(&internal(method, path, q), who).await;
    let v = serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| json!({ "error": String::from_utf8_lossy(&r.body) }));
    (r.status, v)
}
