//! The slices' tests, against a real store (the SQLite file).

use super::*;
use crate::govern::store::SqliteStore;
use std::str::FromStr;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn key(period: &str) -> Want {
    Want {
        key: SliceKey {
            team: "t".into(),
            period: period.into(),
            owner: crate::govern::store::slice_task("t", ""),
        },
        cap: d("1"),
        period_cap: true,
    }
}

/// What the store counts as spent if this worker died now: settled, and every
/// slice's armed part.
fn spent_if_dead(store: &SqliteStore, period: &str) -> Decimal {
    let later = chrono::Utc::now() + chrono::Duration::hours(2);
    let t = store.totals("t", period, later).unwrap();
    t.settled + t.stale
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_store_counts_always_covers_what_was_sent_and_spent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("l.sqlite")).unwrap());
    let slices = Arc::new(Slices::new(
        store.clone(),
        "r",
        "w#1",
        Duration::from_secs(60),
    ));
    let keys = [key("day:a")];
    // Requests of $0.01 at worst, costing $0.004 each, sixteen at a time, until
    // the $1 cap has no room: at every moment, a worker that died would leave the
    // store counting at least what it sent (at worst case) and settled.
    let sent = Arc::new(Mutex::new((Decimal::ZERO, 0u32)));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (slices, keys, sent, store) =
            (slices.clone(), keys.clone(), sent.clone(), store.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(taken) = slices.take(&keys, d("0.01")).await.unwrap() else {
                    return;
                };
                {
                    let mut s = sent.lock().unwrap();
                    s.0 += d("0.01");
                    s.1 += 1;
                    assert!(spent_if_dead(&store, "day:a") >= s.0, "{} sent", s.0);
                }
                tokio::time::sleep(Duration::from_millis(1 + (i % 3))).await;
                // Counted down in the same step as the slice, so the check above
                // never sees one without the other.
                let mut s = sent.lock().unwrap();
                s.0 -= d("0.006");
                slices.finish(&taken, d("0.01"), Some(d("0.004")), &format!("task{i}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    slices.tick(true).await.unwrap();
    let (spent, n) = *sent.lock().unwrap();
    let t = store.totals("t", "day:a", chrono::Utc::now()).unwrap();
    assert_eq!(t.settled, spent, "{n} requests");
    assert_eq!(t.settled, d("0.004") * Decimal::from(n));
    assert_eq!((t.reserved, t.stale), (Decimal::ZERO, Decimal::ZERO));
    // The cap held, and the last requests found no room only near its end.
    assert!(
        t.settled <= d("1") && t.settled > d("0.98"),
        "{}",
        t.settled
    );
    let per_task: Decimal = store
        .run_charges("r")
        .unwrap()
        .iter()
        .filter(|c| c.task_id.starts_with("task"))
        .map(|c| c.settled)
        .sum();
    assert_eq!(per_task, spent, "every settlement is written to its task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_billed_past_its_worst_case_is_written_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("l.sqlite")).unwrap());
    let slices = Arc::new(Slices::new(
        store.clone(),
        "r",
        "w#1",
        Duration::from_secs(60),
    ));
    let keys = [key("day:b")];
    let a = slices.take(&keys, d("0.01")).await.unwrap().unwrap();
    let b = slices.take(&keys, d("0.01")).await.unwrap().unwrap();
    // The provider billed 0.5 for a request whose worst case was 0.01.
    slices.finish(&a, d("0.01"), Some(d("0.5")), "x");
    // The slice has no room left for anything: the next request changes it.
    let c = slices.take(&keys, d("0.01")).await.unwrap().unwrap();
    slices.finish(&b, d("0.01"), None, "y");
    slices.finish(&c, d("0.01"), Some(d("0.002")), "z");
    slices.tick(true).await.unwrap();
    let t = store.totals("t", "day:b", chrono::Utc::now()).unwrap();
    assert_eq!((t.settled, t.reserved), (d("0.502"), Decimal::ZERO));
}

#[tokio::test]
async fn an_idle_slice_goes_back_within_two_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("l.sqlite")).unwrap());
    let slices = Arc::new(Slices::new(
        store.clone(),
        "r",
        "w#1",
        Duration::from_secs(60),
    ));
    let keys = [key("day:c")];
    let a = slices.take(&keys, d("0.1")).await.unwrap().unwrap();
    let held = store
        .totals("t", "day:c", chrono::Utc::now())
        .unwrap()
        .reserved;
    assert!(held >= d("0.2"), "a slice beyond the request: {held}");
    // In flight: only its worst case stays held once nothing is taken.
    tokio::time::sleep(TICK * 2 + Duration::from_millis(100)).await;
    let t = store.totals("t", "day:c", chrono::Utc::now()).unwrap();
    assert_eq!(t.reserved, d("0.1"));
    slices.finish(&a, d("0.1"), Some(d("0.03")), "x");
    tokio::time::sleep(TICK * 2 + Duration::from_millis(100)).await;
    let t = store.totals("t", "day:c", chrono::Utc::now()).unwrap();
    assert_eq!((t.settled, t.reserved), (d("0.03"), Decimal::ZERO));
}

/// A store whose answers to slice changes are lost now and then: after the change
/// was committed (`after`), or before it was made.
struct Lossy {
    inner: SqliteStore,
    calls: std::sync::atomic::AtomicU32,
}

impl CapStore for Lossy {
    fn totals(
        &self,
        t: &str,
        p: &str,
        n: chrono::DateTime<chrono::Utc>,
    ) -> Result<PeriodTotals, StoreError> {
        self.inner.totals(t, p, n)
    }
    fn reserve(
        &self,
        c: &[crate::govern::store::CapKey<'_>],
        a: Decimal,
        m: &EntryMeta,
    ) -> Result<Option<Vec<i64>>, StoreError> {
        self.inner.reserve(c, a, m)
    }
    fn finish(&self, ids: &[i64], a: Option<Decimal>) -> Result<(), StoreError> {
        self.inner.finish(ids, a)
    }
    fn abandon_run(
        &self,
        r: &str,
        n: chrono::DateTime<chrono::Utc>,
    ) -> Result<Decimal, StoreError> {
        self.inner.abandon_run(r, n)
    }
    fn renew(&self, h: &str, u: chrono::DateTime<chrono::Utc>) -> Result<u64, StoreError> {
        self.inner.renew(h, u)
    }
    fn run_charges(&self, r: &str) -> Result<Vec<crate::govern::store::TaskCharge>, StoreError> {
        self.inner.run_charges(r)
    }
    fn report(
        &self,
        t: Option<&str>,
        n: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<crate::govern::store::PeriodRow>, StoreError> {
        self.inner.report(t, n)
    }
    fn set_cap(
        &self,
        t: &str,
        u: Decimal,
        n: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        self.inner.set_cap(t, u, n)
    }
    fn slices(
        &self,
        c: &[SliceChange],
        m: &EntryMeta,
    ) -> Result<Option<Vec<SliceGrant>>, StoreError> {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let lost = StoreError {
            path: None,
            detail: "connection lost".into(),
        };
        match n % 3 {
            // Made, and the answer lost.
            1 => {
                self.inner.slices(c, m)?;
                Err(lost)
            }
            // Lost before it was made.
            2 => Err(lost),
            _ => self.inner.slices(c, m),
        }
    }
    fn slice_state(
        &self,
        h: &str,
        t: &str,
        p: &str,
        o: &str,
    ) -> Result<Option<crate::govern::store::SliceState>, StoreError> {
        self.inner.slice_state(h, t, p, o)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_are_found_out_and_nothing_is_written_twice_or_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Lossy {
        inner: SqliteStore::open(&dir.path().join("l.sqlite")).unwrap(),
        calls: Default::default(),
    });
    let slices = Arc::new(Slices::new(
        store.clone(),
        "r",
        "w#1",
        Duration::from_secs(60),
    ));
    let keys = [key("day:d")];
    let (mut spent, mut failed) = (Decimal::ZERO, 0);
    for i in 0..60 {
        match slices.take(&keys, d("0.01")).await {
            Ok(Some(t)) => {
                slices.finish(&t, d("0.01"), Some(d("0.003")), &format!("task{}", i % 4));
                spent += d("0.003");
            }
            Ok(None) => panic!("room enough"),
            // The ledger could not say what became of a change just now.
            Err(_) => failed += 1,
        }
        if i % 7 == 0 {
            let _ = slices.tick(false).await;
        }
    }
    for _ in 0..6 {
        if slices.tick(true).await.is_ok() && slices.lock().is_empty() {
            break;
        }
    }
    assert!(slices.lock().is_empty(), "every slice ended");
    let t = store.totals("t", "day:d", chrono::Utc::now()).unwrap();
    assert_eq!(
        t.settled, spent,
        "{failed} requests refused on a lost answer"
    );
    assert_eq!((t.reserved, t.stale), (Decimal::ZERO, Decimal::ZERO));
    assert!(store.calls.load(std::sync::atomic::Ordering::Relaxed) > 10);
}
