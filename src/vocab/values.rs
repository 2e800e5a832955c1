//! Scalar value types of the job file that need more than serde's defaults: human
//! durations ("90s", "30m", "2h") and money written as plain decimal numbers; and
//! values left empty.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rust_decimal::Decimal;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Reads a list, a map or a block of settings that may be left empty. YAML reads
/// `teams:` with nothing after it and `teams: null` (or `~`) as the same null, and the
/// JSON Schema sees only that null; serde_yaml gives the first the empty value but
/// refuses the second. Through this (serde's `deserialize_with`) both are empty.
pub fn or_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// [`or_empty`] for a map whose values may each be left empty or null too
/// (`teams: {x: }`, `teams: {x: null}`): such a value is its type's empty value.
pub fn values_or_empty<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de> + Default,
{
    let map: Option<BTreeMap<String, Option<V>>> = Option::deserialize(d)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect())
}

/// [`or_empty`] for a list whose items may each be left empty or null too
/// (`turns: [ ~ ]`): such an item is its type's empty value.
pub fn items_or_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let items: Option<Vec<Option<T>>> = Option::deserialize(d)?;
    Ok(items
        .unwrap_or_default()
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect())
}

/// A duration written the way people write it ("90s", "30m", "1h30m"); a bare number is
/// refused because nobody can tell whether it means seconds or minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration with a unit, such as \"90s\", \"30m\" or \"2h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<HumanDuration, E> {
                parse_duration(s).map(HumanDuration).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration {n}: write a unit, e.g. \"{n}s\" or \"{n}m\""
                )))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration {n}: write a positive duration with a unit, e.g. \"90s\""
                )))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration {n}: write a unit, e.g. \"1500ms\" or \"90s\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

/// The longest duration a job may write; longer ones are typos, and would overflow clocks.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Whether a ledger or queue setting names a PostgreSQL database (a `postgres://` or
/// `postgresql://` URL) rather than a file.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// A `postgres://` URL without its password, for messages and reports: the password of
/// the user part (everything up to the last `@`, which may itself hold `/`, `?` or `@`)
/// and a `password=` query parameter become `***`.
pub fn redact_postgres_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((u, a)) => (Some(u), a),
        None => (None, rest),
    };
    let user = userinfo.map(|u| match u.split_once(':') {
        Some((name, _)) => format!("{name}:***@"),
        None => format!("{u}@"),
    });
    let after = match after.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}", kept.join("&"))
        }
        None => after.to_string(),
    };
    format!("{scheme}://{}{after}", user.unwrap_or_default())
}

/// Whether a `postgres://` URL carries a password.
pub fn postgres_url_has_password(url: &str) -> bool {
    redact_postgres_url(url) != url
}

/// What [`postgres_url_has_password`] finds, for the JSON Schema: a password in the user
/// part (before the last `@`) or a `password=` query parameter, unless it is the `***`
/// that [`redact_postgres_url`] writes.
pub const PASSWORD_URL_PATTERN: &str = concat!(
    r"^postgres(ql)?://(",
    // name:password@ (the name holds no colon, the password anything but `***`)
    r"[^:]*:(|[^*].*|\*|\*[^*].*|\*\*|\*\*[^*].*|\*\*\*.+)@[^@]*",
    r"|",
    // ...?a=1&password=x (after the last `@`)
    r"(.*@)?[^@?]*\?([^&@]*&)*[Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]=(|[^&*@][^&@]*|\*|\*[^&*@][^&@]*|\*\*|\*\*[^&*@][^&@]*|\*\*\*[^&@]+)(&[^@]*)?",
    r")$"
);

/// Parses "90s", "30m", "2h", "1h30m", "500ms"; zero is refused since no limit of zero
/// makes sense.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| {
        format!("invalid duration \"{s}\" ({e}): use a number with a unit, e.g. \"90s\", \"30m\", \"2h\"")
    })?;
    if d.is_zero() {
        return Err(format!("invalid duration \"{s}\": must be more than zero"));
    }
    if d > MAX_DURATION {
        return Err(format!("invalid duration \"{s}\": at most 365 days"));
    }
    Ok(d)
}

/// A number of bytes: a whole number, or one with a unit (`64MB`, `512KiB`, `1GiB`;
/// KB, MB and GB are powers of 1000, KiB, MiB and GiB of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// The units a size may be written in, longest first so that `KiB` is not read as `K`.
const SIZE_UNITS: [(&str, u64); 8] = [
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("B", 1),
    ("", 1),
];

/// Parses `64MB`, `512 KiB`, `1048576`; zero is refused.
/// `--until`: an RFC 3339 time, or `HH:MM`, the next such time in UTC (today's if it is
/// still ahead, else tomorrow's).
pub fn parse_until(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    parse_until_at(s, chrono::Utc::now())
}

fn parse_until_at(
    s: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let time = chrono::NaiveTime::parse_from_str(s, "%H:%M").map_err(|_| {
        format!("\"{s}\" is neither an RFC 3339 time (2026-12-05T06:00:00Z) nor HH:MM (UTC)")
    })?;
    let today = now.date_naive().and_time(time).and_utc();
    Ok(if today > now {
        today
    } else {
        today + chrono::Duration::days(1)
    })
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let unit = t[digits..].trim();
    let bad = || {
        format!("invalid size \"{s}\": write a number of bytes, or one with a unit such as \"64MB\" or \"512KiB\"")
    };
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let (_, mult) = SIZE_UNITS
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        .ok_or_else(bad)?;
    let bytes = n.checked_mul(*mult).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(format!("invalid size \"{s}\": must be more than zero"));
    }
    Ok(bytes)
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 1048576, \"64MB\" or \"512KiB\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteSize, E> {
                parse_size(s).map(ByteSize).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
                parse_size(&n.to_string()).map(ByteSize).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
                Err(E::custom(format!(
                    "invalid size {n}: must be more than zero"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// An amount of US dollars. YAML numbers are read through their shortest decimal
/// spelling so that `1.10` is exactly 1.10, never 1.100000000000000088.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Money(pub Decimal);

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Money;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an amount of US dollars such as 1.50")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Money, E> {
                let t = s.trim().trim_start_matches('$');
                let v = Decimal::from_str(t).map_err(|_| {
                    E::custom(format!(
                        "invalid amount \"{s}\": write a number such as 1.50"
                    ))
                })?;
                non_negative(v)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Money, E> {
                non_negative(Decimal::from(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Money, E> {
                non_negative(Decimal::from(n))
            }
            fn visit_u128<E: de::Error>(self, n: u128) -> Result<Money, E> {
                Err(E::custom(format!(
                    "invalid amount {n}: at most {MAX_MONEY} dollars"
                )))
            }
            fn visit_i128<E: de::Error>(self, n: i128) -> Result<Money, E> {
                Err(E::custom(format!(
                    "invalid amount {n}: at most {MAX_MONEY} dollars"
                )))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Money, E> {
                if !n.is_finite() {
                    return Err(E::custom("invalid amount: must be a finite number"));
                }
                // `{}` prints the shortest string that reads back as the same f64, which is
                // what the user typed.
                let v = Decimal::from_str(&format!("{n}"))
                    .or_else(|_| Decimal::from_scientific(&format!("{n:e}")))
                    .map_err(|_| E::custom(format!("invalid amount {n}")))?;
                non_negative(v)
            }
        }
        d.deserialize_any(V)
    }
}

/// An amount of dollars given on the command line ("2.50", "$2.50"): exact, not
/// negative, at most [`MAX_MONEY`].
pub fn parse_money(s: &str) -> Result<Decimal, String> {
    let t = s.trim().trim_start_matches('$');
    let v =
        Decimal::from_str(t).map_err(|_| format!("\"{s}\" is not an amount of dollars (2.50)"))?;
    if v.is_sign_negative() && !v.is_zero() {
        return Err(format!("{s}: must not be negative"));
    }
    if v > Decimal::from(MAX_MONEY) {
        return Err(format!("{s}: at most {MAX_MONEY} dollars"));
    }
    Ok(v)
}

/// The largest amount (dollars, or dollars per million tokens) a job may write; it keeps
/// every cost computation far from the decimal type's range.
pub const MAX_MONEY: u64 = 1_000_000_000;

fn non_negative<E: de::Error>(v: Decimal) -> Result<Money, E> {
    if v.is_sign_negative() && !v.is_zero() {
        return Err(E::custom(format!(
            "invalid amount {v}: must not be negative"
        )));
    }
    if v > Decimal::from(MAX_MONEY) {
        return Err(E::custom(format!(
            "invalid amount {v}: at most {MAX_MONEY} dollars"
        )));
    }
    Ok(Money(v.normalize()))
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.normalize().to_string())
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.0.normalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct D {
        d: HumanDuration,
    }
    #[derive(Deserialize)]
    struct M {
        m: Money,
    }

    #[test]
    fn the_password_pattern_finds_what_the_check_finds() {
        let re = regex::Regex::new(PASSWORD_URL_PATTERN).expect("the pattern compiles");
        let mut urls: Vec<String> = [
            "postgres://u@h/db",
            "postgres://u:p@h/db",
            "postgresql://u:p@h:5432/db?sslmode=require",
            "postgres://u@h:5432/db",
            "postgres://u:@h/db",
            "postgres://u:***@h/db",
            "postgres://u:****@h/db",
            "postgres://u:*@h/db",
            "postgres://a@b:p@w@h/db",
            "postgres://h/db?password=x",
            "postgres://h/db?sslmode=require&PassWord=x",
            "postgres://h/db?password=***",
            "postgres://h/db?password=",
            "postgres://h/db?xpassword=1",
            "postgres://u@h/db?password=x&b=2",
            "postgres://u:p@h/db?password=***",
            "postgres://h?password=a=b",
            "postgres://h/db?a=1?password=x",
            "Postgres://u:p@h/db",
            "ledger.sqlite",
            "dir:with/colons@x",
            "",
        ]
        .map(String::from)
        .to_vec();
        // Every short URL over a few telling characters.
        let pieces = [
            "postgres://",
            ":",
            "@",
            "*",
            "?",
            "&",
            "password=",
            "=",
            "u",
        ];
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
                .collect();
            urls.extend(
                last.iter()
                    .filter(|u| u.starts_with("postgres://"))
                    .cloned(),
            );
        }
        for url in &urls {
            let has = is_postgres_url(url) && postgres_url_has_password(url);
            assert_eq!(re.is_match(url), has, "{url:?}");
        }
    }

    #[test]
    fn until_takes_rfc_3339_or_the_next_hh_mm() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-04T23:40:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let at = |s: &str| parse_until_at(s, now).map(|t| t.to_rfc3339());
        assert_eq!(at("06:00").unwrap(), "2026-12-05T06:00:00+00:00");
        assert_eq!(at("23:50").unwrap(), "2026-12-04T23:50:00+00:00");
        assert_eq!(
            at("2026-12-05T01:00:00+01:00").unwrap(),
            "2026-12-05T00:00:00+00:00"
        );
        assert!(at("tomorrow").is_err());
        assert!(at("25:00").is_err());
    }

    #[test]
    fn durations_need_units() {
        let d: D = serde_yaml::from_str("d: 90s").unwrap();
        assert_eq!(d.d.0, Duration::from_secs(90));
        let d: D = serde_yaml::from_str("d: 1h30m").unwrap();
        assert_eq!(d.d.0, Duration::from_secs(5400));
        let d: D = serde_yaml::from_str("d: 250ms").unwrap();
        assert_eq!(d.d.0, Duration::from_millis(250));
        let e = serde_yaml::from_str::<D>("d: 90")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("write a unit"), "{e}");
        let e = serde_yaml::from_str::<D>("d: ten minutes")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("invalid duration"), "{e}");
        assert!(serde_yaml::from_str::<D>("d: 0s").is_err());
        assert!(serde_yaml::from_str::<D>("d: 580000000000y").is_err());
    }

    #[test]
    fn sizes_take_units() {
        for (text, bytes) in [
            ("1048576", 1_048_576),
            ("64MB", 64_000_000),
            ("64 MiB", 64 << 20),
            ("512kib", 512 << 10),
            ("2GB", 2_000_000_000),
            ("10B", 10),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "",
            "0",
            "MB",
            "1.5MB",
            "-1",
            "12 parsecs",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn money_is_exact() {
        let m: M = serde_yaml::from_str("m: 1.10").unwrap();
        assert_eq!(m.m.0, Decimal::from_str("1.1").unwrap());
        let m: M = serde_yaml::from_str("m: 0.3").unwrap();
        assert_eq!(m.m.0.to_string(), "0.3");
        let m: M = serde_yaml::from_str("m: 25").unwrap();
        assert_eq!(m.m.0, Decimal::from(25));
        let m: M = serde_yaml::from_str("m: \"0.000001\"").unwrap();
        assert_eq!(m.m.0.to_string(), "0.000001");
        let m: M = serde_yaml::from_str("m: 0.0000001").unwrap();
        assert_eq!(m.m.0.to_string(), "0.0000001");
        assert!(serde_yaml::from_str::<M>("m: -1").is_err());
        assert!(serde_yaml::from_str::<M>("m: 1e23").is_err());
        assert!(serde_yaml::from_str::<M>("m: \"79228162514264337593543950335\"").is_err());
        assert!(serde_yaml::from_str::<M>("m: 340282366920938463463374607431768211455").is_err());
        assert!(serde_yaml::from_str::<M>("m: lots").is_err());
    }
}
