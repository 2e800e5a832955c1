//! The chaos model's and the stream splitter's source of numbers.

/// A small deterministic generator: SplitMix64 seeded by an FNV-1a hash of what the turn
/// depends on. Written out rather than taken from `rand`, whose generators promise no
/// stable output across versions: a failing seed must replay the same next year.
pub(in crate::sim) struct Rng(u64);

impl Rng {
    /// One stream per (seed, key, step, purpose), so that e.g. the number of calls a
    /// turn makes does not shift its faults.
    pub(in crate::sim) fn new(seed: u64, key: &str, step: usize, stream: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for part in [
            &seed.to_le_bytes()[..],
            key.as_bytes(),
            &(step as u64).to_le_bytes(),
            stream.as_bytes(),
        ] {
            for b in part {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }

    pub(in crate::sim) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in 0..n (0 when n is 0).
    pub(in crate::sim) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next() % n as u64) as usize
    }

    /// A number in lo..=hi.
    pub(in crate::sim) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next() % span,
            // The whole range of u64.
            None => self.next(),
        }
    }

    pub(in crate::sim) fn percent(&mut self, p: u32) -> bool {
        self.next() % 100 < u64::from(p)
    }

    /// One of `items`, which callers keep non-empty (constant lists, checked vectors).
    pub(in crate::sim) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
