//! Quoting outside text in messages: a value from a job file, a file the job names or a
//! server's answer may be megabytes long (or a file that should not be shown at all), so
//! a message quotes at most a short prefix of it and says how long it was.

/// Characters of a quoted value a message keeps.
pub const QUOTE_CHARS: usize = 48;
/// Characters of a whole message kept when it has no quotes to shorten.
pub const MESSAGE_CHARS: usize = 1_000;

/// Text safe in HTML and SVG element content and in quoted attribute values: what a
/// page shows from a run (task ids, model output, tool results) is markup-free text.
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The start of `s`, at most `max` characters, with how long the whole was when cut.
pub fn prefix(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes in all)", &s[..cut], s.len()),
    }
}

/// `message` with every double-quoted part longer than [`QUOTE_CHARS`] cut to its start,
/// and the whole kept under [`MESSAGE_CHARS`] characters. Escaped quotes (`\"`) inside
/// a quoted part are part of it, as serde and Rust's `{:?}` write them.
pub fn clip_quotes(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MESSAGE_CHARS + 64));
    let mut rest = message;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        let Some(close) = closing_quote(after) else {
            rest = after;
            break;
        };
        let inner = &after[..close];
        match inner.char_indices().nth(QUOTE_CHARS) {
            None => out.push_str(inner),
            Some((cut, _)) => {
                out.push_str(&inner[..cut]);
                out.push_str(&format!("...\" ({} bytes in all)", inner.len()));
                rest = &after[close + 1..];
                continue;
            }
        }
        out.push('"');
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    if out.chars().count() > MESSAGE_CHARS {
        prefix(&out, MESSAGE_CHARS)
    } else {
        out
    }
}

/// The byte offset of the quote that closes a quoted part (skipping `\"` and `\\`).
fn closing_quote(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// FNV-1a: a digest that, unlike std's hasher, is the same in every build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_markup_and_quotes() {
        assert_eq!(
            html(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(html("model=claude-haiku-4-5"), "model=claude-haiku-4-5");
    }

    #[test]
    fn long_quotes_are_cut_and_short_ones_kept() {
        let huge = "x".repeat(20_000_000);
        let m = clip_quotes(&format!(
            "invalid duration \"{huge}\" (expected a unit): use \"90s\""
        ));
        assert!(m.len() < 200, "{}", m.len());
        assert!(
            m.contains("\"xxxx") && m.contains("(20000000 bytes in all)"),
            "{m}"
        );
        assert!(m.ends_with("use \"90s\""), "{m}");
        assert_eq!(clip_quotes("a \"short\" one"), "a \"short\" one");
        let escaped = format!(
            "string \"{}\\\"{}\", expected struct",
            "a".repeat(10),
            "b".repeat(100)
        );
        let m = clip_quotes(&escaped);
        assert!(m.ends_with(", expected struct"), "{m}");
        assert_eq!(clip_quotes("unclosed \"quote"), "unclosed \"quote");
        let no_quotes = "y".repeat(5_000);
        assert!(clip_quotes(&no_quotes).len() < MESSAGE_CHARS + 40);
        assert_eq!(prefix("héllo", 2), "hé... (6 bytes in all)");
        assert_eq!(prefix("hi", 2), "hi");
    }
}
