//! The plain-text log line: what `tracing_subscriber`'s default ("full") format writes
//! without colours, written with less work per line, and with every value's control
//! characters escaped.
//!
//! floodgate writes a line per message and per session, so the formatting is on the path
//! of every message. The default formatter reaches each field through `core::fmt` with
//! three arguments and colour wrappers that are empty without a terminal, and formats the
//! whole date at every line. [`TextFormat`] writes names and values directly into one
//! buffer of the thread's and hands the line over in one call, keeps the date and time up
//! to the second from the line before, and formats a string value with `Debug` only when
//! it needs escaping.
//!
//! The lines are those of the default format: `2026-11-26T06:43:11.775806Z  INFO
//! floodgate::proxy::data: message client=127.0.0.1 user="" size=442`, with spans (none
//! are used on the session path) as `name{fields}:` before the target. One difference, for
//! safety: every control character but tab is escaped, in the message and in values
//! written with `Display` (`%value`) alike, where the default format escapes only the
//! terminal ones (ESC, BEL, BS, FF, DEL, C1) and only in the message. So text from a client
//! or from upstream that reaches a line cannot start a new line or carry terminal escapes
//! into the log. String values are `Debug`-quoted, as before, which escapes them too.

use std::cell::RefCell;
use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The plain-text event format; see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextFormat;

impl<S, N> FormatEvent<S, N> for TextFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The line is put together in a buffer of this thread's, with direct pushes, and
        // handed to the writer in one call: each call through `Writer` is a dynamic one.
        // tracing dispatches no event while another is handled on the thread, so the buffer
        // is free whenever a line starts; were it not, the line would get a buffer of its
        // own rather than a panic.
        LINE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                let out = format_line(&mut line, ctx, event).and_then(|()| writer.write_str(&line));
                if line.capacity() > KEEP_LINE_CAPACITY {
                    *line = String::new();
                }
                out
            }
            Err(_) => {
                let mut line = String::new();
                format_line(&mut line, ctx, event)?;
                writer.write_str(&line)
            }
        })
    }
}

thread_local! {
    /// The line being formatted on this thread.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A line buffer larger than this after a line is given back, so one huge line does not
/// keep its memory for good.
const KEEP_LINE_CAPACITY: usize = 16 * 1024;

/// Writes the whole line of `event`, its newline included, to `line`.
fn format_line<S, N>(
    line: &mut String,
    ctx: &FmtContext<'_, S, N>,
    event: &Event<'_>,
) -> fmt::Result
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let meta = event.metadata();
    write_timestamp(line, std::time::SystemTime::now())?;
    line.push_str(level_column(meta.level()));
    if let Some(scope) = ctx.event_scope() {
        let mut seen = false;
        for span in scope.from_root() {
            line.push_str(span.metadata().name());
            seen = true;
            let ext = span.extensions();
            if let Some(fields) = ext.get::<FormattedFields<N>>() {
                if !fields.is_empty() {
                    write!(line, "{{{fields}}}")?;
                }
            }
            line.push(':');
        }
        if seen {
            line.push(' ');
        }
    }
    line.push_str(meta.target());
    line.push_str(": ");
    let mut fields = Fields {
        out: line,
        first: true,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    line.push('\n');
    Ok(())
}

/// The level as the default format pads it (to five places), and the space after it.
fn level_column(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE ",
        Level::DEBUG => "DEBUG ",
        Level::INFO => " INFO ",
        Level::WARN => " WARN ",
        Level::ERROR => "ERROR ",
    }
}

thread_local! {
    /// The second last written on this thread and its `YYYY-MM-DDTHH:MM:SS.` text.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Writes `at` as the default format does, in UTC with microseconds:
/// `2026-11-26T06:43:11.775806Z`. The part up to the second is formatted once per second
/// per thread.
fn write_timestamp(out: &mut impl Write, at: std::time::SystemTime) -> fmt::Result {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    SECOND.with_borrow_mut(|(second, text)| {
        if *second != secs {
            text.clear();
            // The Unix epoch as a civil date-time in UTC (clamped beyond the year 9999).
            let t = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0).saturating_add(
                jiff::SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX)),
            );
            write!(
                text,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )?;
            *second = secs;
        }
        out.write_str(text)
    })?;
    let mut micros = [b'0'; 6];
    write_digits(&mut micros, u64::from(since.subsec_micros()));
    // Six ASCII digits.
    out.write_str(std::str::from_utf8(&micros).map_err(|_| fmt::Error)?)?;
    out.write_str("Z ")
}

/// Writes `n` into the end of `buf` in decimal (leading places keep what they held);
/// returns where its digits begin.
fn write_digits(buf: &mut [u8], mut n: u64) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            return i;
        }
    }
}

/// Writes `n` in decimal.
fn write_decimal(out: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    let start = write_digits(&mut buf, n);
    out.extend(buf[start..].iter().map(|&d| char::from(d)));
}

/// Writes the event's fields as the default format does: the message as it is, then
/// `name=value` with one space between them.
struct Fields<'a> {
    out: &'a mut String,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    /// Starts a field: a space after the first, then `name=` (nothing for the message).
    fn start(&mut self, field: &Field) -> bool {
        if !std::mem::replace(&mut self.first, false) {
            self.out.push(' ');
        }
        let name = field.name();
        if name == "message" {
            return true;
        }
        self.out.push_str(name.strip_prefix("r#").unwrap_or(name));
        self.out.push('=');
        false
    }

    fn field(&mut self, field: &Field, value: impl FnOnce(&mut Self, bool) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        let message = self.start(field);
        self.result = value(self, message);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, |f, message| {
            if message {
                Escaped(&mut *f.out).write_str(value)
            } else if value
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
            {
                f.out.push('"');
                f.out.push_str(value);
                f.out.push('"');
                Ok(())
            } else {
                // Debug escapes quotes, backslashes and every control character.
                write!(f.out, "{value:?}")
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |f, _| {
            write_decimal(f.out, value);
            Ok(())
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, |f, _| {
            if value < 0 {
                f.out.push('-');
            }
            write_decimal(f.out, value.unsigned_abs());
            Ok(())
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, |f, _| {
            f.out.push_str(if value { "true" } else { "false" });
            Ok(())
        });
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.field(field, |f, _| {
            let mut out = Escaped(&mut *f.out);
            write!(out, "{value}")?;
            if let Some(source) = value.source() {
                // As the default format lists an error's causes.
                write!(f.out, " {}.sources=[", field.name())?;
                let mut next = Some(source);
                let mut first = true;
                while let Some(e) = next {
                    if !std::mem::replace(&mut first, false) {
                        f.out.write_str(", ")?;
                    }
                    write!(Escaped(&mut *f.out), "{e}")?;
                    next = e.source();
                }
                f.out.write_char(']')?;
            }
            Ok(())
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` and `?value` fields and the message arrive here, through `Debug`.
        self.field(field, |f, _| write!(Escaped(&mut *f.out), "{value:?}"));
    }
}

/// Writes through to `W`, escaping the characters that could end a log line or act on a
/// terminal: line feed and carriage return as `\n` and `\r`, the other C0 controls (tab
/// excepted) and DEL as `\xNN`, C1 controls as `\u{NN}` (the default format's escapes for
/// the ones it escapes).
struct Escaped<W>(W);

impl<W: Write> Write for Escaped<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Printable ASCII and tab, the usual case, checked byte by byte: nothing to escape.
        if s.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\t') {
            return self.0.write_str(s);
        }
        let clean = |c: char| c == '\t' || !(c.is_control());
        if s.chars().all(clean) {
            return self.0.write_str(s);
        }
        for c in s.chars() {
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                c if clean(c) => self.0.write_char(c)?,
                c if (c as u32) < 0x80 => write!(self.0, "\\x{:02x}", c as u32)?,
                c => write!(self.0, "\\u{{{:x}}}", c as u32)?,
            }
        }
        Ok(())
    }
}

/// An IP address as text, written once for the many log lines of a session that name it
/// (`client = %ip`): writing an address through `Display` each time costs more than the
/// rest of a field.
#[derive(Clone, Copy)]
pub struct IpText {
    len: u8,
    /// Long enough for any address: an IPv6 address with an embedded IPv4 one is 45 octets.
    text: [u8; 45],
}

impl IpText {
    /// `ip` as `Display` writes it.
    pub fn new(ip: std::net::IpAddr) -> Self {
        let mut out = IpText {
            len: 0,
            text: [0; 45],
        };
        let mut rest = &mut out.text[..];
        // An address always fits (see `text`).
        let _ = std::io::Write::write_fmt(&mut rest, format_args!("{ip}"));
        let left = rest.len();
        out.len = (45 - left) as u8;
        out
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Written from an address's `Display`: ASCII.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Display for IpText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for IpText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    /// The same events through the default format (no colours) and through [`TextFormat`].
    fn both(events: impl Fn()) -> (Vec<String>, Vec<String>) {
        let default = Captured::default();
        let ours = Captured::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .with_writer(default.clone())
            .finish();
        tracing::subscriber::with_default(sub, &events);
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .event_format(TextFormat)
            .with_writer(ours.clone())
            .finish();
        tracing::subscriber::with_default(sub, &events);
        (default.lines(), ours.lines())
    }

    /// The line without its timestamp (the two formatters ran at different instants).
    fn untimed(line: &str) -> &str {
        line.split_once("Z ").map(|(_, rest)| rest).unwrap_or(line)
    }

    #[test]
    fn lines_are_those_of_the_default_format() {
        #[derive(Debug)]
        struct Thing {
            #[allow(dead_code)]
            n: u8,
        }
        let (default, ours) = both(|| {
            let ip: std::net::IpAddr = "192.0.2.7".parse().unwrap();
            tracing::info!(
                client = %ip,
                user = "",
                sender = "a@example.org",
                recipients = 3usize,
                size = 442u64,
                delta = -5i64,
                tls = true,
                quoted = "say \"hi\" \\ \u{e9}t\u{e9}",
                thing = ?Thing { n: 1 },
                r#type = "x",
                "message"
            );
            tracing::warn!("only a message, {} formatted", 2);
            tracing::error!(code = 421u16, "upstream failed");
            tracing::debug!(at = 0u64, "zero");
            tracing::trace!(big = u64::MAX, small = i64::MIN, "extremes");
            let err = std::io::Error::other("broken pipe");
            tracing::warn!(
                error = &err as &(dyn std::error::Error + 'static),
                "an error"
            );
            let span = tracing::info_span!("outer", id = 7u64);
            let _entered = span.enter();
            tracing::info!(x = 1u64, "inside");
        });
        assert_eq!(default.len(), 7, "{default:?}");
        assert_eq!(ours.len(), default.len(), "{ours:?}");
        for (d, o) in default.iter().zip(&ours) {
            assert_eq!(untimed(o), untimed(d));
        }
    }

    /// A value whose formatting logs a line of its own: tracing does not dispatch an event
    /// raised while another is being handled on the same thread, so the inner line is
    /// dropped, as with the default format, and the outer line and the next come out whole.
    #[test]
    fn a_value_that_logs_while_it_is_formatted() {
        struct Noisy;
        impl fmt::Display for Noisy {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                tracing::warn!(depth = 2u64, "inner");
                f.write_str("noisy")
            }
        }
        let (default, ours) = both(|| {
            tracing::info!(value = %Noisy, after = "x", "outer");
            tracing::info!("next");
        });
        assert_eq!(ours.len(), default.len(), "{default:?} {ours:?}");
        for (d, o) in default.iter().zip(&ours) {
            assert_eq!(untimed(o), untimed(d));
        }
        assert_eq!(ours.len(), 2, "{ours:?}");
        assert!(
            ours[0].ends_with("outer value=noisy after=\"x\""),
            "{}",
            ours[0]
        );
    }

    #[test]
    fn an_error_with_sources_is_listed_as_the_default_format_does() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("outer failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let (default, ours) = both(|| {
            let e = Outer(std::io::Error::other("inner"));
            tracing::warn!(error = &e as &(dyn std::error::Error + 'static), "failed");
        });
        assert_eq!(untimed(&ours[0]), untimed(&default[0]));
    }

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::new(1_795_675_391, 775_806_999);
        let mut s = String::new();
        write_timestamp(&mut s, at).unwrap();
        assert_eq!(s, "2026-11-26T06:43:11.775806Z ");
        // The same second again, from the cache; then the next one.
        let mut s = String::new();
        write_timestamp(&mut s, at + std::time::Duration::from_micros(5)).unwrap();
        assert_eq!(s, "2026-11-26T06:43:11.775811Z ");
        let mut s = String::new();
        write_timestamp(&mut s, at + std::time::Duration::from_secs(49)).unwrap();
        assert_eq!(s, "2026-11-26T06:44:00.775806Z ");
        let mut s = String::new();
        write_timestamp(&mut s, std::time::UNIX_EPOCH).unwrap();
        assert_eq!(s, "1970-01-01T00:00:00.000000Z ");
    }

    #[test]
    fn control_characters_in_values_cannot_break_the_line() {
        let (_, ours) = both(|| {
            let verb = "X\r\nFAKE  INFO floodgate: forged\x1b[31m\u{85}";
            tracing::info!(verb = %verb, text = verb, "unknown command");
        });
        assert_eq!(ours.len(), 1, "{ours:?}");
        assert!(
            ours[0].ends_with(
                r#"unknown command verb=X\r\nFAKE  INFO floodgate: forged\x1b[31m\u{85} text="X\r\nFAKE  INFO floodgate: forged\u{1b}[31m\u{85}""#
            ),
            "{}",
            ours[0]
        );
    }

    #[test]
    fn long_values_and_many_fields_are_written_as_the_default_format_does() {
        let (default, ours) = both(|| {
            for n in [1usize, 200, 255, 256, 257, 300, 1000] {
                let v = "v".repeat(n);
                tracing::info!(a = v.as_str(), b = %v, n = n as u64, "{v}");
            }
            tracing::info!(
                a1 = 1u64,
                a2 = 22u64,
                a3 = 333u64,
                a4 = "4444",
                a5 = "55555",
                a6 = 1u64,
                a7 = 22u64,
                a8 = 333u64,
                a9 = "4444",
                a10 = "55555",
                a11 = 1u64,
                a12 = 22u64,
                a13 = 333u64,
                a14 = "4444",
                a15 = "55555",
                a16 = 1u64,
                a17 = 22u64,
                a18 = 333u64,
                a19 = "4444",
                a20 = "55555",
                a21 = u64::MAX,
                a22 = i64::MIN,
                a23 = "x",
                a24 = "y",
                a25 = "z",
                "many"
            );
        });
        assert_eq!(ours.len(), 8, "{ours:?}");
        assert_eq!(ours.len(), default.len());
        for (d, o) in default.iter().zip(&ours) {
            assert_eq!(untimed(o), untimed(d));
        }
    }

    #[test]
    fn ip_text_is_the_address_as_display_writes_it() {
        for ip in [
            "192.0.2.7",
            "255.255.255.255",
            "::1",
            "::ffff:255.255.255.255",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(IpText::new(ip).as_str(), ip.to_string());
            assert_eq!(IpText::new(ip).to_string(), ip.to_string());
            assert_eq!(
                format!("{:?}", IpText::new(ip)),
                format!("{:?}", ip.to_string())
            );
        }
        let (default, ours) = both(|| {
            let ip: std::net::IpAddr = "2001:db8::7".parse().unwrap();
            tracing::info!(client = %IpText::new(ip), "x");
        });
        assert_eq!(untimed(&ours[0]), untimed(&default[0]));
        assert!(ours[0].ends_with("x client=2001:db8::7"), "{}", ours[0]);
    }

    proptest::proptest! {
        /// Every address, v4 or v6, is written as `Display` writes it.
        #[test]
        fn ip_text_of_any_address(ip in proptest::prelude::any::<std::net::IpAddr>()) {
            let text = IpText::new(ip);
            proptest::prop_assert_eq!(text.as_str(), ip.to_string());
        }

        /// Any string value, as `%value`, `value` or the message, gives one line, and
        /// with the characters that need no escaping the same line as the default format.
        #[test]
        fn any_value_gives_one_line(s in ".{0,40}") {
            let (default, ours) = both(|| {
                tracing::info!(shown = %s, text = s.as_str(), "{}", s);
            });
            proptest::prop_assert_eq!(ours.len(), 1);
            if !s.chars().any(|c| c.is_control() && c != '\t') {
                proptest::prop_assert_eq!(untimed(&ours[0]), untimed(&default[0]));
            }
        }
    }
}
