//! Escaping of text that comes from user files (task ids, variants, model names) before
//! it goes into HTML, SVG or Markdown.

/// Text safe in HTML and SVG element content and in quoted attribute values (one rule
/// for every page agentbatch writes, in `text`).
pub(crate) use crate::text::html;

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
