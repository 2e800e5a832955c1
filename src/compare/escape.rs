//! Escaping of text that comes from user files (task ids, variants, model names) before
//! it goes into HTML, SVG or Markdown.

/// Text safe in HTML and SVG element content and in quoted attribute values.
pub(crate) fn html(s: &str) -> String {
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

/// Text shown literally in a Markdown table cell: the characters Markdown would read
/// as formatting, HTML or a cell border are backslash-escaped, line ends become spaces.
pub(crate) fn markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '&' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
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
    fn markdown_escapes_formatting_and_cell_borders() {
        assert_eq!(
            markdown("a|b *c* <d>\nfix_x"),
            "a\\|b \\*c\\* \\<d\\> fix\\_x"
        );
        assert_eq!(
            markdown("model=claude-haiku-4-5,toolset=coding"),
            "model=claude-haiku-4-5,toolset=coding"
        );
    }
}
