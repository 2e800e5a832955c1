//! The upper bound of every number a job file may write. A number past its bound is a
//! typo or an attack, and some would crash the run (a semaphore of 2^64 permits, a plan
//! of 10^8 epochs allocated at once): they are refused while parsing, with the file,
//! line, column and field like any other error. docs/guide/job-files.md lists the same table.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Visitor};

/// Tasks in flight at once (job, team, `--concurrency`).
pub const CONCURRENCY: u64 = 100_000;
/// Runs of each task per variant.
pub const EPOCHS: u64 = 10_000;
/// Combinations of a matrix.
pub const VARIANTS: u64 = 10_000;
/// Task runs in one plan (tasks x variants x epochs).
pub const PLAN_TASKS: u64 = 1_000_000;
/// `max_tokens` per request, `min_max_tokens`, `top_k`, thinking budgets.
pub const TOKENS_PER_REQUEST: u64 = 1_000_000;
/// Model requests per task.
pub const TURNS: u64 = 1_000_000;
/// `limits.max_repeats`: like turns, since more repeats than turns can never be seen.
pub const REPEATS: u64 = TURNS;
/// A task's input or output token budget, and the tier boundary of a long-context price.
pub const TOKEN_BUDGET: u64 = 1_000_000_000_000;
/// `context.keep`: tool results (or turns) a compaction keeps whole; more would never
/// compact.
pub const KEEP: usize = 10_000;
/// Retries of one request.
pub const RETRIES: u64 = 1_000;
/// Requests per minute.
pub const RPM: u64 = 100_000_000;
/// Tokens per minute (the fields are 32-bit).
pub const TPM: u64 = u32::MAX as u64;
/// Bytes of a bash command's output the model sees.
pub const BASH_OUTPUT: u64 = 100_000_000;
/// Bytes of one provider response body (`max_response_bytes`).
pub const RESPONSE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Reads an optional whole number of at most `MAX` (serde's `deserialize_with`). The
/// bound is checked inside the visitor, where the parser still knows the number's line
/// and column.
pub fn at_most<'de, D, T, const MAX: u64>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    d.deserialize_option(Bounded::<T, MAX>(PhantomData))
}

/// Reads a required whole number of at most `MAX` (serde's `deserialize_with`).
pub fn required_at_most<'de, D, T, const MAX: u64>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    d.deserialize_u64(Bounded::<T, MAX>(PhantomData))?
        .ok_or_else(|| de::Error::custom("a number is required"))
}

struct Bounded<T, const MAX: u64>(PhantomData<T>);

impl<'de, T: TryFrom<u64>, const MAX: u64> Visitor<'de> for Bounded<T, MAX> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a whole number from 0 to {MAX}")
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Option<T>, E> {
        if n > MAX {
            return Err(E::custom(format!("{n} is too large: at most {MAX}")));
        }
        T::try_from(n)
            .map(Some)
            .map_err(|_| E::custom(format!("{n} is too large for this machine")))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Option<T>, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("{n} is negative: use 0 to {MAX}"))),
        }
    }
    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Option<T>, E> {
        Err(E::custom(format!("{n} is too large: at most {MAX}")))
    }
    fn visit_i128<E: de::Error>(self, n: i128) -> Result<Option<T>, E> {
        Err(E::custom(format!("{n} is out of range: use 0 to {MAX}")))
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_u64(self)
    }
}

/// Bytes of text (prompts, system prompts, variables, commands) all the task runs of a
/// plan hold together: every run carries its own copy, in memory and in run.json.
pub const PLAN_TEXT: u64 = 512 * 1024 * 1024;

/// Refuses a number of task runs over [`PLAN_TASKS`], saying where they come from.
pub fn plan_size(tasks: usize, variants: usize, epochs: u64) -> Result<u64, String> {
    let n = (tasks as u64)
        .saturating_mul(variants as u64)
        .saturating_mul(epochs);
    if n > PLAN_TASKS {
        Err(format!(
            "{tasks} task(s) x {variants} variant(s) x {epochs} epoch(s) is {n} task runs: at most {PLAN_TASKS} in one run; split the job"
        ))
    } else {
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct F {
        #[serde(default, deserialize_with = "at_most::<_, _, 10>")]
        n: Option<u32>,
    }

    #[derive(serde::Deserialize)]
    struct R {
        #[serde(deserialize_with = "required_at_most::<_, _, 10>")]
        n: u64,
    }

    #[test]
    fn numbers_over_their_bound_are_refused_where_they_are_written() {
        let ok: F = serde_yaml::from_str("n: 10").unwrap();
        assert_eq!(ok.n, Some(10));
        let none: F = serde_yaml::from_str("{}").unwrap();
        assert_eq!(none.n, None);
        let null: F = serde_yaml::from_str("n: null").unwrap();
        assert_eq!(null.n, None);
        for bad in [
            "n: 11",
            "n: 18446744073709551615",
            "n: 99999999999999999999999",
            "n: -1",
            "n: 1.5",
        ] {
            let e = serde_yaml::from_str::<F>(bad).err().unwrap();
            assert!(e.location().is_some(), "{bad}: {e}");
        }
        let e = serde_yaml::from_str::<F>("n: 11")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("at most 10"), "{e}");
        assert_eq!(serde_yaml::from_str::<R>("n: 3").unwrap().n, 3);
        assert!(serde_yaml::from_str::<R>("n: 30").is_err());
        assert!(serde_yaml::from_str::<R>("{}").is_err());
        assert!(plan_size(1000, 10, 100).is_ok());
        assert!(plan_size(1000, 10, 101)
            .unwrap_err()
            .contains("1010000 task runs"));
        assert!(plan_size(usize::MAX, usize::MAX, u64::MAX).is_err());
    }
}
