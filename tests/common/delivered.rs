//! Reading a message as a smart host delivered it to a file (LF line ends): its header
//! section, its body, and a header's values. Shared by the Postfix and Exim harnesses.

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The header section (up to the first empty line), lossily decoded.
pub fn head(raw: &[u8]) -> String {
    let end = find(raw, b"\n\n").unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// The bytes after the header section's empty line (none without one).
pub fn body(raw: &[u8]) -> &[u8] {
    match find(raw, b"\n\n") {
        Some(i) => &raw[i + 2..],
        None => &[],
    }
}

/// Every value of header `name` (case-insensitive) in `head`, unfolded, in order.
pub fn header_values(head: &str, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some(v) = current.as_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some(v) = current.take() {
            out.push(v);
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.eq_ignore_ascii_case(name) {
                current = Some(v.trim().to_string());
            }
        }
    }
    out.extend(current);
    out
}
