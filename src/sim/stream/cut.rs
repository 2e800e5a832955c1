//! A streamed body cut inside an event (`mid_stream: cut` with `cut_inside`): the
//! events before it whole, then the next one up to a place in its `data:` line, and a
//! clean end of the body, so only the event's missing end says it was cut.

use super::{wire, Sse};
use crate::sim::script::CutInside;

/// The bytes of `all` up to `place` in event `n` (`n` events go out whole).
pub(super) fn cut_inside(all: &[Sse], n: usize, place: CutInside) -> Vec<u8> {
    let (mut bytes, ends) = wire(all);
    let Some(&end) = ends.get(n) else {
        return bytes;
    };
    let start = n.checked_sub(1).map_or(0, |i| ends[i]);
    let Some(data) = bytes[start..end]
        .windows(5)
        .position(|w| w == b"data:")
        .map(|i| start + i + 5)
    else {
        return bytes;
    };
    let line_end = bytes[data..end]
        .iter()
        .position(|b| *b == b'\n')
        .map_or(end, |i| data + i);
    let mut middle = data + (line_end - data) / 2;
    // A UTF-8 continuation byte is 10xxxxxx: step back to the start of its character.
    while middle > data && bytes[middle] & 0xc0 == 0x80 {
        middle -= 1;
    }
    let at = match place {
        CutInside::AfterData => data,
        CutInside::MidData => middle,
        // Just after the lead byte (11xxxxxx) of the first multi-byte character.
        CutInside::MidCharacter => bytes[data..]
            .iter()
            .position(|b| *b >= 0xc0)
            .map_or(middle, |i| data + i + 1),
    };
    bytes.truncate(at);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<Sse> {
        vec![
            Sse {
                event: Some("a".into()),
                data: r#"{"x":1}"#.into(),
            },
            Sse {
                event: None,
                data: r#"{"text":"a café"}"#.into(),
            },
        ]
    }

    #[test]
    fn each_place_stops_inside_the_next_events_data_line() {
        let all = events();
        let after = cut_inside(&all, 1, CutInside::AfterData);
        assert!(after.ends_with(b"}\n\ndata:"), "{after:?}");
        let mid = cut_inside(&all, 1, CutInside::MidData);
        let mid = String::from_utf8(mid).expect("cut at a character boundary");
        assert!(mid.ends_with(r#"data: {"text":"#), "{mid}");
        let ch = cut_inside(&all, 1, CutInside::MidCharacter);
        assert_eq!(ch.last(), Some(&0xc3), "the lead byte of é");
        assert!(String::from_utf8(ch).is_err());
        // Without a character to cut, the middle of the line.
        assert_eq!(
            cut_inside(&all[..1], 0, CutInside::MidCharacter),
            cut_inside(&all[..1], 0, CutInside::MidData)
        );
    }
}
