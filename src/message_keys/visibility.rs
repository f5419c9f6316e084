//! What an HTML element's inline style (and its presentational attributes) says about the
//! visibility of its text: hidden by CSS, or drawn in the colour of its background.
//!
//! Lures pad each copy with random words the reader never sees (`display:none`,
//! `font-size:0`, white on white) so that copies differ in their text; the fingerprint reads
//! only what is shown. Only inline styles are read (mail clients drop most style sheets).

/// A colour, red, green and blue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rgb(pub u8, pub u8, pub u8);

/// White: the background of a document that sets none.
pub(super) const WHITE: Rgb = Rgb(255, 255, 255);
/// Black: the text colour of a document that sets none.
pub(super) const BLACK: Rgb = Rgb(0, 0, 0);

/// Colours this close (the largest difference of one channel) read as the same.
const NEAR: u8 = 24;

/// At most this many bytes of one style attribute are read.
const MAX_STYLE: usize = 4096;

impl Rgb {
    /// Whether text of this colour on `background` cannot be told from it.
    pub(super) fn near(self, background: Rgb) -> bool {
        self.0.abs_diff(background.0) <= NEAR
            && self.1.abs_diff(background.1) <= NEAR
            && self.2.abs_diff(background.2) <= NEAR
    }
}

/// What one element's style says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Style {
    /// Its contents are not shown (display, visibility, a zero font size, zero opacity, a
    /// zero box with overflow hidden, `mso-hide:all`).
    pub hidden: bool,
    /// Its text colour, when set.
    pub color: Option<Rgb>,
    /// Its background colour, when set.
    pub background: Option<Rgb>,
}

/// Reads an inline `style` attribute's declarations. Unknown properties and values are
/// passed over; nothing fails.
pub(super) fn parse_style(style: &str) -> Style {
    let mut out = Style::default();
    let mut zero_box = false;
    let mut overflow_hidden = false;
    let mut end = style.len().min(MAX_STYLE);
    while !style.is_char_boundary(end) {
        end -= 1;
    }
    // Declarations found by their bytes (';' and ':' are ASCII, never inside a character).
    let style = &style[..end];
    let mut from = 0;
    while from <= style.len() {
        let rest = &style.as_bytes()[from..];
        let stop = rest
            .iter()
            .position(|&c| c == b';')
            .map_or(style.len(), |k| from + k);
        let declaration = &style[from..stop];
        from = stop + 1;
        let Some(colon) = declaration.bytes().position(|c| c == b':') else {
            continue;
        };
        // Names and values compared without regard to case, nothing copied.
        let name = trim(&declaration[..colon]);
        let value = trim(without_important(trim(&declaration[colon + 1..])));
        let value_is = |v: &str| value.eq_ignore_ascii_case(v);
        // The name in lower case, matched as bytes (a longer one is none of these).
        let mut buf = [0u8; 16];
        let key = match buf.get_mut(..name.len()) {
            Some(key) => {
                key.copy_from_slice(name.as_bytes());
                key.make_ascii_lowercase();
                &*key
            }
            None => b"",
        };
        match key {
            b"display" => out.hidden |= value_is("none"),
            b"visibility" => out.hidden |= value_is("hidden") || value_is("collapse"),
            b"font-size" => out.hidden |= is_zero_length(value),
            b"opacity" => out.hidden |= value.parse::<f32>().is_ok_and(|o| o < 0.05),
            b"mso-hide" => out.hidden |= value_is("all"),
            b"max-height" | b"height" | b"max-width" | b"width" => {
                zero_box |= is_zero_length(value);
            }
            b"overflow" | b"overflow-x" | b"overflow-y" => overflow_hidden |= value_is("hidden"),
            b"color" => out.color = parse_color(value).or(out.color),
            b"background-color" => out.background = parse_color(value).or(out.background),
            b"background" => {
                out.background = value
                    .split_whitespace()
                    .find_map(parse_color)
                    .or(out.background);
            }
            _ => {}
        }
    }
    out.hidden |= zero_box && overflow_hidden;
    out
}

/// `s` without the whitespace at either end, as [`str::trim`] has it: ASCII whitespace
/// passed over byte by byte, other characters decoded only at an end that is not ASCII.
fn trim(s: &str) -> &str {
    let b = s.as_bytes();
    let space = |c: &u8| matches!(c, b'\t'..=b'\r' | b' ');
    let start = b.iter().position(|c| !space(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !space(c)).map_or(start, |e| e + 1);
    let t = &s[start..end];
    match (t.as_bytes().first(), t.as_bytes().last()) {
        (Some(&f), Some(&l)) if f >= 0x80 || l >= 0x80 => t.trim(),
        _ => t,
    }
}

/// `value` without the `!important` flags at its end (in any case).
fn without_important(mut value: &str) -> &str {
    const FLAG: &str = "!important";
    while let Some(at) = value.len().checked_sub(FLAG.len()) {
        if !value.is_char_boundary(at) || !value[at..].eq_ignore_ascii_case(FLAG) {
            break;
        }
        value = &value[..at];
    }
    value
}

/// Whether a CSS length is zero (`0`, `0px`, `0pt`, `0em`, `0%`, `0.0rem`).
fn is_zero_length(value: &str) -> bool {
    let number = value.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%');
    // Digits and a point only, one of them a non-zero digit: a number that is not zero,
    // told without parsing it.
    let b = number.as_bytes();
    if b.iter().all(|&c| c.is_ascii_digit() || c == b'.')
        && b.iter().any(|&c| matches!(c, b'1'..=b'9'))
    {
        return false;
    }
    number.parse::<f32>().is_ok_and(|n| n == 0.0)
}

/// A CSS or HTML colour: `#rgb`, `#rrggbb`, `rgb(…)`/`rgba(…)` (an alpha under 0.05 is no
/// colour at all), or a common name.
pub(super) fn parse_color(value: &str) -> Option<Rgb> {
    // Hex digits are read in either case: only other forms are lower-cased (copied).
    let value = trim(value);
    if value.as_bytes().first() == Some(&b'#') {
        return parse_hex(&value[1..]);
    }
    let v = value.to_ascii_lowercase();
    if let Some(args) = v
        .strip_prefix("rgba(")
        .or_else(|| v.strip_prefix("rgb("))
        .and_then(|a| a.strip_suffix(')'))
    {
        let parts: Vec<&str> = args
            .split([',', ' ', '/'])
            .filter(|p| !p.is_empty())
            .collect();
        if parts.len() < 3 {
            return None;
        }
        if parts.len() > 3 && parts[3].parse::<f32>().is_ok_and(|a| a < 0.05) {
            return None;
        }
        let channel = |p: &str| -> Option<u8> {
            if let Some(pct) = p.strip_suffix('%') {
                let x: f32 = pct.parse().ok()?;
                return Some((x.clamp(0.0, 100.0) * 2.55).round() as u8);
            }
            let x: f32 = p.parse().ok()?;
            Some(x.clamp(0.0, 255.0).round() as u8)
        };
        return Some(Rgb(
            channel(parts[0])?,
            channel(parts[1])?,
            channel(parts[2])?,
        ));
    }
    let named = match v.as_str() {
        "white" | "snow" | "ivory" | "ghostwhite" | "whitesmoke" | "floralwhite" => WHITE,
        "black" => BLACK,
        "red" => Rgb(255, 0, 0),
        "green" => Rgb(0, 128, 0),
        "blue" => Rgb(0, 0, 255),
        "yellow" => Rgb(255, 255, 0),
        "gray" | "grey" => Rgb(128, 128, 128),
        "silver" => Rgb(192, 192, 192),
        "navy" => Rgb(0, 0, 128),
        "orange" => Rgb(255, 165, 0),
        _ => return None,
    };
    Some(named)
}

/// `rgb` or `rrggbb` (a leading `#` already gone); an HTML attribute may leave the `#` out.
fn parse_hex(hex: &str) -> Option<Rgb> {
    let b = hex.as_bytes();
    if !matches!(b.len(), 3 | 6) || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // Every byte is a hex digit: '0'–'9', or a letter whose low bits count from 1.
    let digit = |i: usize| match b[i] {
        c @ b'0'..=b'9' => c - b'0',
        c => (c & 0x0f) + 9,
    };
    match b.len() {
        3 => Some(Rgb(digit(0) * 17, digit(1) * 17, digit(2) * 17)),
        6 => Some(Rgb(
            digit(0) * 16 + digit(1),
            digit(2) * 16 + digit(3),
            digit(4) * 16 + digit(5),
        )),
        _ => None,
    }
}

/// An HTML colour attribute (`bgcolor`, `<font color>`): a CSS colour or bare hex digits.
pub(super) fn parse_attribute_color(value: &str) -> Option<Rgb> {
    parse_color(value).or_else(|| parse_hex(value.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`parse_style`] as it was written on `str` methods: what the byte reading is tested
    /// against.
    fn parse_style_by_str(style: &str) -> Style {
        let mut out = Style::default();
        let (mut zero_box, mut overflow_hidden) = (false, false);
        let mut end = style.len().min(MAX_STYLE);
        while !style.is_char_boundary(end) {
            end -= 1;
        }
        for declaration in style[..end].split(';') {
            let Some((name, value)) = declaration.split_once(':') else {
                continue;
            };
            let name = name.trim().to_ascii_lowercase();
            let value = without_important(value.trim()).trim();
            let value_is = |v: &str| value.eq_ignore_ascii_case(v);
            match name.as_str() {
                "display" => out.hidden |= value_is("none"),
                "visibility" => out.hidden |= value_is("hidden") || value_is("collapse"),
                "font-size" => out.hidden |= is_zero_length(value),
                "opacity" => out.hidden |= value.parse::<f32>().is_ok_and(|o| o < 0.05),
                "mso-hide" => out.hidden |= value_is("all"),
                "max-height" | "height" | "max-width" | "width" => {
                    zero_box |= is_zero_length(value)
                }
                "overflow" | "overflow-x" | "overflow-y" => overflow_hidden |= value_is("hidden"),
                "color" => out.color = parse_color(value).or(out.color),
                "background-color" => out.background = parse_color(value).or(out.background),
                "background" => {
                    out.background = value
                        .split_whitespace()
                        .find_map(parse_color)
                        .or(out.background)
                }
                _ => {}
            }
        }
        out.hidden |= zero_box && overflow_hidden;
        out
    }
    use proptest::prelude::*;

    #[test]
    fn hiding_declarations_are_read() {
        for s in [
            "display:none",
            "DISPLAY: None !important",
            "visibility:hidden",
            "font-size:0",
            "font-size: 0px",
            "font-size:0pt",
            "font-size:0.0em",
            "opacity:0",
            "max-height:0; overflow:hidden",
            "width:0px;height:0px;overflow:hidden",
            "mso-hide:all",
            "color:red; display:none;",
        ] {
            assert!(parse_style(s).hidden, "{s}");
        }
        for s in [
            "display:block",
            "font-size:12px",
            "max-height:0",
            "overflow:hidden",
            "opacity:0.9",
            "",
            ";;:",
            "font-size:",
        ] {
            assert!(!parse_style(s).hidden, "{s}");
        }
    }

    #[test]
    fn colours_are_read() {
        assert_eq!(parse_color("#fff"), Some(WHITE));
        assert_eq!(parse_color("#FeFeFe"), Some(Rgb(254, 254, 254)));
        assert_eq!(parse_color("rgb(255, 255, 250)"), Some(Rgb(255, 255, 250)));
        assert_eq!(parse_color("rgba(0,0,0,0)"), None);
        assert_eq!(parse_color("rgb(100%, 0%, 0%)"), Some(Rgb(255, 0, 0)));
        assert_eq!(parse_color("White"), Some(WHITE));
        assert_eq!(parse_color("#ggg"), None);
        assert_eq!(parse_color("rgb(1,2)"), None);
        assert_eq!(parse_attribute_color("ffffff"), Some(WHITE));
        let s = parse_style("color:#fefefe;background:url(x.png) #fff no-repeat");
        assert_eq!(s.color, Some(Rgb(254, 254, 254)));
        assert_eq!(s.background, Some(WHITE));
        assert!(Rgb(250, 250, 250).near(WHITE));
        assert!(!Rgb(200, 200, 200).near(WHITE));
    }

    proptest! {
        /// Any hex-like text: the colour `from_str_radix` reads.
        #[test]
        fn hex_colours_are_read_as_by_from_str_radix(hex in "[0-9a-fA-FgG#]{0,7}") {
            let radix = |h: &str| u8::from_str_radix(h, 16).ok();
            let expected = if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                None
            } else if hex.len() == 3 {
                (|| Some(Rgb(radix(&hex[0..1])? * 17, radix(&hex[1..2])? * 17, radix(&hex[2..3])? * 17)))()
            } else if hex.len() == 6 {
                (|| Some(Rgb(radix(&hex[0..2])?, radix(&hex[2..4])?, radix(&hex[4..6])?)))()
            } else {
                None
            };
            prop_assert_eq!(parse_hex(&hex), expected);
        }

        /// Any length: zero as parsing it finds.
        #[test]
        fn zero_lengths_are_told_as_parsed(v in "[0-9.]{0,6}(px|pt|%|e-50|e5)?") {
            let number = v.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%');
            prop_assert_eq!(is_zero_length(&v), number.parse::<f32>().is_ok_and(|n| n == 0.0));
        }

        /// Any text: trimmed as `str::trim` trims it.
        #[test]
        fn trim_is_str_trim(s in "([a-z:;!]|[ \t\x0b\x0c\r\n\x1c]|[\u{85}\u{A0}\u{2003}\u{E9}\u{3000}])*") {
            prop_assert_eq!(trim(&s), s.trim());
        }

        /// Any style: the declarations read as split on ';' and ':' and trimmed by `str`.
        #[test]
        fn styles_are_read_as_split_by_str(
            s in "((display|Color|background|font-size|opacity|WIDTH|overflow| |\u{A0})*(:)?( |\u{2003})*(none|#fff|0px|0|hidden|red|ALL|!important|\u{A0})*;?)*",
        ) {
            prop_assert_eq!(parse_style(&s), parse_style_by_str(&s));
        }
        /// Any style text: no panic, and a `display:none` appended always hides.
        #[test]
        fn any_style_parses(s in "\\PC{0,200}") {
            let _ = parse_style(&s);
            let _ = parse_color(&s);
            let hiding = format!("{s};display:none");
            prop_assert!(parse_style(&hiding).hidden);
        }
    }
}
