//! The login form: the only page shown without credentials, and it shows nothing else.

use std::time::Duration;

use crate::admin::console::auth::retry_after_secs;
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::html_response;
use crate::admin::http::Response;

/// The login page with `status` (200, or 401/403/429 with `why`); `wait`: how long this
/// address waits before its next token is looked at (after a wrong one).
pub fn page(status: u16, why: Option<&str>, wait: Option<Duration>, host: &str) -> Response {
    let mut body = String::from("<div class=\"login\">");
    if let Some(w) = why {
        body.push_str(&format!(
            "<p class=\"error\" id=\"login-error\">{}</p>",
            html::escape(w)
        ));
    }
    if let Some(wait) = wait {
        let secs = retry_after_secs(wait);
        let unit = if secs == 1 { "second" } else { "seconds" };
        body.push_str(&format!(
            "<p class=\"note\" id=\"login-wait\" data-seconds=\"{secs}\">Each wrong token \
             makes this address wait longer: the next one is looked at after {secs} {unit}.</p>"
        ));
    }
    body.push_str(
        "<form method=\"post\" action=\"/console/login\">\
         <label for=\"token\">Admin token (<code>[admin] token_file</code>)</label>\
         <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"off\" required \
         autofocus><button type=\"submit\">Log in</button></form>\
         <p class=\"note\">The session cookie holds a random id, not the token; it ends \
         after an hour unused.</p></div>",
    );
    let shell = Shell {
        csrf: None,
        actions: false,
        host,
    };
    html_response(
        status,
        html::page("floodgate console", Nav::Login, &shell, &body),
    )
}
