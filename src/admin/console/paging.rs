//! Pages of a long list: which slice a page number shows, and the links between pages.

use std::ops::Range;

use super::html;

/// Rows on one page of every paged console list.
pub const PAGE_SIZE: usize = 50;
/// The highest page number asked for that is honoured (later ones show the last page).
pub const MAX_PAGE: usize = 1_000_000;

/// One page of a list: its 1-based number and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// 1-based.
    pub number: usize,
    /// Rows per page (at least 1).
    pub size: usize,
}

impl Page {
    /// The page `?page=` asks for: absent, empty, zero or not a number is page 1; larger
    /// than [`MAX_PAGE`] is [`MAX_PAGE`].
    pub fn parse(param: Option<&str>, size: usize) -> Page {
        let number = param
            .and_then(|p| p.trim().parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .map_or(1, |n| n.min(MAX_PAGE));
        Page {
            number,
            size: size.max(1),
        }
    }

    /// The rows needed to show this page, counted from the first: `number × size`.
    pub fn needed(&self) -> usize {
        self.number.saturating_mul(self.size)
    }

    /// The pages a list of `total` rows has (at least 1).
    pub fn count(&self, total: usize) -> usize {
        total.div_ceil(self.size).max(1)
    }

    /// This page, moved back to the last page of a list of `total` rows when past it.
    pub fn clamp(self, total: usize) -> Page {
        Page {
            number: self.number.min(self.count(total)),
            ..self
        }
    }

    /// The indices of this page's rows in a list of `total` rows (empty past the end).
    pub fn range(&self, total: usize) -> Range<usize> {
        let start = (self.number - 1).saturating_mul(self.size).min(total);
        start..start.saturating_add(self.size).min(total)
    }
}

/// The links under a paged table: previous, "page N of M" (or "page N" when the total
/// is not known: `more` says whether a next page exists), next. `base` is the page's path
/// and `params` its other query parameters, kept on every link.
pub fn links(
    base: &str,
    params: &[(&str, &str)],
    page: Page,
    total: Option<usize>,
    more: bool,
) -> String {
    let link = |n: usize, label: &str, rel: &str| {
        let number = n.to_string();
        let mut p: Vec<(&str, &str)> = params.to_vec();
        p.push(("page", &number));
        format!(
            "<a rel=\"{rel}\" href=\"{}\">{label}</a>",
            html::url(base, &p)
        )
    };
    let mut out = String::from("<nav class=\"pages\" aria-label=\"pages\">");
    if page.number > 1 {
        out.push_str(&link(page.number - 1, "← previous", "prev"));
    }
    match total {
        Some(t) => out.push_str(&format!(
            " <span>page {} of {}</span> ",
            page.number,
            page.count(t)
        )),
        None => out.push_str(&format!(" <span>page {}</span> ", page.number)),
    }
    let next = match total {
        Some(t) => page.number < page.count(t),
        None => more,
    };
    if next {
        out.push_str(&link(page.number + 1, "next →", "next"));
    }
    out.push_str("</nav>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_forgiving_and_bounded() {
        let p = |s| Page::parse(s, 50).number;
        assert_eq!(p(None), 1);
        assert_eq!(p(Some("")), 1);
        assert_eq!(p(Some("0")), 1);
        assert_eq!(p(Some("-3")), 1);
        assert_eq!(p(Some("abc")), 1);
        assert_eq!(p(Some("7")), 7);
        assert_eq!(p(Some("99999999999999999999999")), 1);
        assert_eq!(p(Some("5000000")), MAX_PAGE);
        assert_eq!(Page::parse(None, 0).size, 1);
    }

    #[test]
    fn ranges_and_counts() {
        let pg = |n| Page {
            number: n,
            size: 50,
        };
        assert_eq!(pg(1).range(0), 0..0);
        assert_eq!(pg(1).count(0), 1);
        assert_eq!(pg(1).range(120), 0..50);
        assert_eq!(pg(3).range(120), 100..120);
        assert_eq!(pg(4).range(120), 120..120);
        assert_eq!(pg(3).count(120), 3);
        assert_eq!(pg(2).count(100), 2);
        assert_eq!(pg(9).clamp(120).number, 3);
        assert_eq!(pg(2).clamp(120).number, 2);
        assert_eq!(pg(2000).clamp(100_000).range(100_000), 99_950..100_000);
        assert_eq!(pg(3).needed(), 150);
        assert_eq!(pg(MAX_PAGE).range(10), 10..10);
    }

    #[test]
    fn links_keep_parameters_and_stop_at_the_ends() {
        let l = links(
            "/console/top",
            &[("limit", "a&b")],
            Page {
                number: 2,
                size: 50,
            },
            Some(120),
            false,
        );
        assert!(
            l.contains("href=\"/console/top?limit=a%26b&amp;page=1\""),
            "{l}"
        );
        assert!(
            l.contains("href=\"/console/top?limit=a%26b&amp;page=3\""),
            "{l}"
        );
        assert!(l.contains("page 2 of 3"), "{l}");
        let l = links(
            "/console/held",
            &[],
            Page {
                number: 1,
                size: 50,
            },
            Some(10),
            false,
        );
        assert!(!l.contains("prev") && !l.contains("next"), "{l}");
        let l = links(
            "/console/top",
            &[],
            Page {
                number: 1,
                size: 50,
            },
            None,
            true,
        );
        assert!(l.contains("page=2") && l.contains("page 1<"), "{l}");
    }
}
