//! The SQLite ledger's unit tests (the PostgreSQL one is checked against it in
//! tests/integration/postgres.rs).

use super::*;
use chrono::TimeZone;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn meta(expires_in: i64) -> EntryMeta {
    EntryMeta {
        run_id: "r".into(),
        task_id: "t".into(),
        expires_at: Utc::now() + chrono::Duration::seconds(expires_in),
        holder: None,
    }
}

#[test]
fn periods_are_utc_calendar_periods() {
    let t = Utc.with_ymd_and_hms(2026, 11, 29, 23, 59, 59).unwrap();
    assert_eq!(period_key(Period::Day, t), "day:2026-11-29");
    assert_eq!(period_key(Period::Week, t), "week:2026-W48");
    assert_eq!(period_key(Period::Month, t), "month:2026-11");
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
    assert_eq!(period_key(Period::Week, monday), "week:2026-W49");
}

#[test]
fn reserve_settle_release_keep_totals_exact() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("sub/ledger.sqlite")).unwrap();
    let cap = d("1.00");
    let a = s
        .try_reserve("team", "day:x", cap, d("0.60"), &meta(60))
        .unwrap()
        .unwrap();
    assert!(s
        .try_reserve("team", "day:x", cap, d("0.41"), &meta(60))
        .unwrap()
        .is_none());
    let b = s
        .try_reserve("team", "day:x", cap, d("0.40"), &meta(60))
        .unwrap()
        .unwrap();
    s.settle(a, d("0.123456789")).unwrap();
    s.release(b).unwrap();
    let t = s.totals("team", "day:x", Utc::now()).unwrap();
    assert_eq!(
        t,
        PeriodTotals {
            settled: d("0.123456789"),
            reserved: Decimal::ZERO,
            stale: Decimal::ZERO,
            cap_set: None,
        }
    );
    // settling twice changes nothing
    s.settle(a, d("5")).unwrap();
    assert_eq!(
        s.totals("team", "day:x", Utc::now()).unwrap().settled,
        d("0.123456789")
    );
    let rows = s.report(None, Utc::now()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].cap, Some(cap));
    assert_eq!(rows[0].entries, 1);
}

#[test]
fn a_dead_runs_reservations_are_stale_at_once_and_stay_spent() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
    let now = Utc::now();
    let mine = s
        .try_reserve("t", "day:x", d("10"), d("0.4"), &meta(3600))
        .unwrap()
        .unwrap();
    let other = EntryMeta {
        run_id: "other".into(),
        ..meta(3600)
    };
    s.try_reserve("t", "day:x", d("10"), d("0.2"), &other)
        .unwrap()
        .unwrap();
    let settled = s
        .try_reserve("t", "day:x", d("10"), d("0.1"), &meta(3600))
        .unwrap()
        .unwrap();
    s.settle(settled, d("0.05")).unwrap();
    assert_eq!(s.totals("t", "day:x", now).unwrap().stale, d("0"));
    assert_eq!(s.abandon_run("r", now).unwrap(), d("0.4"));
    let t = s.totals("t", "day:x", now).unwrap();
    assert_eq!(
        (t.settled, t.reserved, t.stale),
        (d("0.05"), d("0.6"), d("0.4"))
    );
    assert_eq!(s.abandon_run("r", now).unwrap(), d("0"), "once");
    // A late settle of an abandoned reservation still counts it once.
    s.settle(mine, d("0.3")).unwrap();
    let t = s.totals("t", "day:x", now).unwrap();
    assert_eq!(
        (t.settled, t.reserved, t.stale),
        (d("0.35"), d("0.2"), d("0"))
    );
}

#[test]
fn expired_reservations_stay_spent_but_are_marked_stale() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("ledger.sqlite")).unwrap();
    s.try_reserve("t", "p", d("1"), d("0.3"), &meta(-5))
        .unwrap()
        .unwrap();
    let t = s.totals("t", "p", Utc::now()).unwrap();
    assert_eq!((t.reserved, t.stale), (d("0.3"), d("0.3")));
    assert!(s
        .try_reserve("t", "p", d("1"), d("0.71"), &meta(60))
        .unwrap()
        .is_none());
}

#[test]
fn a_file_from_before_holders_gets_the_column_and_keeps_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&SCHEMA.replace(",\n    holder TEXT", ""))
            .unwrap();
        c.execute(
            "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at)
             VALUES ('t', 'p', '0.5', 'reserved', 'old', 'a', '2026-01-01T00:00:00.000Z', '2099-01-01T00:00:00.000Z')",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO totals (team, period, settled, reserved, cap) VALUES ('t', 'p', '0', '0.5', '1')",
            [],
        )
        .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    let held = EntryMeta {
        holder: Some("w#1".into()),
        ..meta(-1)
    };
    s.try_reserve("t", "p", d("1"), d("0.25"), &held)
        .unwrap()
        .unwrap();
    let t = s.totals("t", "p", Utc::now()).unwrap();
    assert_eq!((t.reserved, t.stale), (d("0.75"), d("0.25")));
    assert_eq!(
        s.renew("w#1", Utc::now() + chrono::Duration::seconds(60))
            .unwrap(),
        1
    );
    assert_eq!(s.totals("t", "p", Utc::now()).unwrap().stale, d("0"));
    let charges = s.run_charges("old").unwrap();
    assert_eq!(charges.len(), 1);
    assert_eq!((charges[0].settled, charges[0].open), (d("0"), d("0.5")));
    // Opened again: the column is there, nothing is added twice.
    drop(s);
    SqliteStore::open(&path).unwrap();
}

#[test]
fn many_processes_may_create_the_same_file_at_once() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| SqliteStore::open(&path).map(|_| ())))
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
        });
    }
}

#[test]
fn two_connections_share_one_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let stores: Vec<SqliteStore> = (0..2).map(|_| SqliteStore::open(&path).unwrap()).collect();
    std::thread::scope(|scope| {
        for s in &stores {
            scope.spawn(move || {
                for _ in 0..50 {
                    let _ = s
                        .try_reserve("t", "p", d("1"), d("0.03"), &meta(60))
                        .unwrap();
                }
            });
        }
    });
    let t = stores[0].totals("t", "p", Utc::now()).unwrap();
    assert_eq!(t.reserved, d("0.99"));
}

#[test]
fn a_reservation_goes_into_every_cap_or_none_and_settles_in_all_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
    let key = |team, cap: &str| CapKey {
        team,
        period: "run:r",
        cap: d(cap),
    };
    assert_eq!(
        s.reserve(&[key("(run)", "1"), key("red", "0.2")], d("0.3"), &meta(60))
            .unwrap(),
        None,
        "red has no room for it"
    );
    let ids = s
        .reserve(&[key("(run)", "1"), key("red", "0.5")], d("0.3"), &meta(60))
        .unwrap()
        .unwrap();
    assert_eq!(ids.len(), 2);
    for team in ["(run)", "red"] {
        let t = s.totals(team, "run:r", Utc::now()).unwrap();
        assert_eq!((t.settled, t.reserved), (d("0"), d("0.3")), "{team}");
    }
    s.finish(&ids, Some(d("0.1"))).unwrap();
    s.finish(&ids, Some(d("0.2"))).unwrap();
    for team in ["(run)", "red"] {
        let t = s.totals(team, "run:r", Utc::now()).unwrap();
        assert_eq!((t.settled, t.reserved), (d("0.1"), d("0")), "{team}");
    }
    let charges = s.run_charges("r").unwrap();
    assert_eq!(charges.len(), 2);
    assert!(charges
        .iter()
        .all(|c| c.settled == d("0.1") && c.open == d("0")));
}

fn slice(
    id: Option<EntryId>,
    size: &str,
    min: &str,
    armed: &str,
    settled: &[(&str, &str)],
) -> SliceChange {
    SliceChange {
        team: "t".into(),
        period: "day:x".into(),
        cap: d("1"),
        period_cap: true,
        owner: slice_task("", "v"),
        seq: 0,
        id,
        settled: settled.iter().map(|(t, a)| (t.to_string(), d(a))).collect(),
        size: d(size),
        min_size: d(min),
        armed: d(armed),
    }
}

fn at(mut change: SliceChange, seq: i64) -> SliceChange {
    change.seq = seq;
    change
}

fn holder_meta(holder: &str, expires_in_ms: i64) -> EntryMeta {
    EntryMeta {
        run_id: "r".into(),
        task_id: SLICE_TASK.into(),
        expires_at: Utc::now() + chrono::Duration::milliseconds(expires_in_ms),
        holder: Some(holder.into()),
    }
}

#[test]
fn slices_grow_within_the_cap_and_write_settlements_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
    let m = holder_meta("w1", 60_000);
    let a = s
        .slices(&[slice(None, "0.6", "0.1", "0.2", &[])], &m)
        .unwrap()
        .unwrap();
    let a_id = a[0].id;
    assert_eq!((a[0].size, a[0].armed), (d("0.6"), d("0.2")));
    assert_eq!(a[0].totals.reserved, d("0.6"));
    // Another worker wants 0.6 and must do with the 0.4 left, since it needs only 0.3.
    let b = s
        .slices(
            &[slice(None, "0.6", "0.3", "0.3", &[])],
            &holder_meta("w2", 60_000),
        )
        .unwrap()
        .unwrap();
    assert_eq!((b[0].size, b[0].armed), (d("0.4"), d("0.3")));
    // Nothing left: a third cannot have its least.
    assert!(s
        .slices(
            &[slice(None, "0.2", "0.01", "0.01", &[])],
            &holder_meta("w3", 60_000)
        )
        .unwrap()
        .is_none());
    assert!(s
        .try_reserve("t", "day:x", d("1"), d("0.01"), &meta(60))
        .unwrap()
        .is_none());
    // The first settles 0.15 for two tasks out of its armed part and shrinks to 0.1.
    let a = s
        .slices(
            &[at(
                slice(a_id, "0.1", "0.1", "0.05", &[("x", "0.1"), ("y", "0.05")]),
                1,
            )],
            &m,
        )
        .unwrap()
        .unwrap();
    assert_eq!(a[0].totals.settled, d("0.15"));
    assert_eq!(a[0].totals.reserved, d("0.5"));
    let charges = s.run_charges("r").unwrap();
    let x = charges.iter().find(|c| c.task_id == "x").unwrap();
    assert_eq!(x.settled, d("0.1"));
    // A negative amount is a defect, and so is a change to an entry changed since.
    assert!(s
        .slices(&[at(slice(a_id, "0.1", "0.1", "-0.05", &[]), 2)], &m)
        .is_err());
    let stale = s
        .slices(&[at(slice(a_id, "0.1", "0.1", "0.05", &[]), 1)], &m)
        .unwrap_err();
    assert!(stale.detail.contains("changed elsewhere"), "{stale}");
    // What the holder reads back when an answer is lost.
    let st = s
        .slice_state("w1", "t", "day:x", &slice_task("", "v"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (Some(st.id), st.seq, st.amount, st.idle),
        (a_id, 2, d("0.1"), d("0.05"))
    );
    // An answer billed past its worst case is settled in full, beyond the slice's
    // 0.1, and ending the slice gives the rest of the cap back.
    let a = s
        .slices(&[at(slice(a_id, "0", "0", "0", &[("z", "0.12")]), 2)], &m)
        .unwrap()
        .unwrap();
    assert_eq!(a[0].id, None);
    assert_eq!(a[0].totals.settled, d("0.27"));
    assert_eq!(a[0].totals.reserved, d("0.4"));
}

#[test]
fn a_dead_workers_slice_keeps_its_armed_part_spent_and_gives_the_rest_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
    let m = holder_meta("dead", 300);
    s.slices(&[slice(None, "0.8", "0.8", "0.3", &[])], &m)
        .unwrap()
        .unwrap();
    let t = s.totals("t", "day:x", Utc::now()).unwrap();
    assert_eq!((t.reserved, t.stale), (d("0.8"), d("0")));
    std::thread::sleep(std::time::Duration::from_millis(400));
    let t = s.totals("t", "day:x", Utc::now()).unwrap();
    // The armed 0.3 may have been billed: spent. The idle 0.5 came back.
    assert_eq!((t.reserved, t.stale), (d("0.3"), d("0.3")));
    // A renewal by a holder that was only slow does not take the idle part again.
    s.renew("dead", Utc::now() + chrono::Duration::seconds(60))
        .unwrap();
    let t = s.totals("t", "day:x", Utc::now()).unwrap();
    assert_eq!((t.reserved, t.stale), (d("0.3"), d("0.3")));
    // So another worker can reserve up to 0.7 and not a cent more.
    assert!(s
        .try_reserve("t", "day:x", d("1"), d("0.71"), &meta(60))
        .unwrap()
        .is_none());
    let r = s
        .try_reserve("t", "day:x", d("1"), d("0.7"), &meta(60))
        .unwrap()
        .unwrap();
    s.settle(r, d("0.7")).unwrap();
    // What the dead worker held is what collect counts against the run.
    let open: Decimal = s.run_charges("r").unwrap().iter().map(|c| c.open).sum();
    assert_eq!(open, d("0.3"));
    // The slow holder's next change to its expired slice needs room like a new one.
    let id = s.report(None, Utc::now()).unwrap();
    assert_eq!(id[0].totals.settled, d("0.7"));
}

#[test]
fn changes_in_one_transaction_share_the_caps_room_and_a_lowered_cap_applies_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
    let m = holder_meta("w1", 60_000);
    // Two owners' slices of one cap in one transaction: 0.7 and 0.7 cannot both fit
    // in a $1 cap; the second gets what the first left.
    let mut other = slice(None, "0.7", "0.2", "0.2", &[]);
    other.owner = slice_task("", "w");
    let g = s
        .slices(&[slice(None, "0.7", "0.2", "0.2", &[]), other], &m)
        .unwrap()
        .unwrap();
    assert_eq!((g[0].size, g[1].size), (d("0.7"), d("0.3")));
    assert_eq!(g[1].totals.reserved, d("1"));
    // The team's cap is lowered to $0.50 in the ledger: a slice that wants to grow
    // gets only its least, and the least beyond what it keeps is refused.
    s.set_cap("t", d("0.5"), Utc::now()).unwrap();
    let (a, b) = (g[0].id, g[1].id);
    let shrunk = s
        .slices(&[at(slice(a, "0.9", "0.25", "0.25", &[]), 1)], &m)
        .unwrap()
        .unwrap();
    assert_eq!((shrunk[0].size, shrunk[0].armed), (d("0.25"), d("0.25")));
    assert!(s
        .slices(&[at(slice(b, "0.5", "0.4", "0.4", &[]), 1)], &m)
        .unwrap()
        .is_none());
}
