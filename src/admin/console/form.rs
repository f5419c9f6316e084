//! The console's HTML forms: the fields of a posted `application/x-www-form-urlencoded`
//! body (a field may repeat: the selected ids), and the page a form action sends the
//! browser back to with its result.

use crate::admin::http::{percent_decode, percent_encode};

/// Every `name=value` pair of a form body, in order, percent-decoded (`+` is a space);
/// pairs that do not decode are left out.
pub fn fields(body: &[u8]) -> Vec<(String, String)> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    text.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(n, true).ok()?, percent_decode(v, true).ok()?))
        })
        .collect()
}

/// The first value of field `name`.
pub fn first<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Every value of field `name`.
pub fn all<'a>(fields: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `back` when it is a console page of this server (`/console/…`, no scheme, no host, no
/// control characters), else `fallback`: a form cannot send the browser elsewhere.
pub fn back_to<'a>(back: Option<&'a str>, fallback: &'a str) -> &'a str {
    match back {
        Some(b)
            if b.starts_with("/console/")
                && !b.contains("//")
                && !b.contains('\\')
                && !b.contains("/../")
                && b.chars().all(|c| !c.is_control() && c != ' ') =>
        {
            b
        }
        _ => fallback,
    }
}

/// `page` with the result of an action added to its query: `done=TEXT`, or `failed=TEXT`
/// when `ok` is false (an earlier result in `page` is dropped).
pub fn with_result(page: &str, ok: bool, text: &str) -> String {
    let (path, query) = page.split_once('?').unwrap_or((page, ""));
    let mut kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("done=") && !p.starts_with("failed="))
        .collect();
    let result = format!(
        "{}={}",
        if ok { "done" } else { "failed" },
        percent_encode(text)
    );
    kept.push(&result);
    format!("{path}?{}", kept.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_fields_and_decoding() {
        let f = fields(b"csrf=ab&id=x-1&id=y-2&reason=spam+run%21&op=release&bad=%zz");
        assert_eq!(all(&f, "id"), ["x-1", "y-2"]);
        assert_eq!(first(&f, "reason"), Some("spam run!"));
        assert_eq!(first(&f, "bad"), None);
        assert!(fields(b"\xff").is_empty());
    }

    #[test]
    fn back_stays_on_the_console() {
        let f = "/console/held";
        assert_eq!(
            back_to(Some("/console/held?key=a"), f),
            "/console/held?key=a"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example/console/",
            "/console//evil",
            "/console/../v1/held",
            "/console/\\evil",
            "/console/x\r\nSet-Cookie: a=b",
            "/v1/held",
            "",
        ] {
            assert_eq!(back_to(Some(bad), f), f, "{bad:?}");
        }
        assert_eq!(back_to(None, f), f);
    }

    #[test]
    fn results_replace_earlier_ones() {
        assert_eq!(
            with_result("/console/held?key=a&done=old", true, "2 released"),
            "/console/held?key=a&done=2%20released"
        );
        assert_eq!(
            with_result("/console/key/bob", false, "x&y"),
            "/console/key/bob?failed=x%26y"
        );
    }
}
