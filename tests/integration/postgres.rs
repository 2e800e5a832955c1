//! PostgreSQL as the shared ledger, against a real server (tests/run.sh starts a
//! throwaway cluster and sets AGENTBATCH_TEST_PG_URL): the same answers as the SQLite
//! file for the same operations, no cap ever exceeded by concurrent writers, schema
//! versions checked, and several runner processes sharing one team cap.

use std::process::Stdio;
use std::str::FromStr;
use std::sync::Arc;

use agentbatch::govern::open_store;
use agentbatch::govern::store::{self, CapStore, EntryMeta, SqliteStore};
use chrono::Utc;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::common::{bin, read_csv, Case};

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// The test server's URL.
fn server() -> String {
    std::env::var("AGENTBATCH_TEST_PG_URL").expect(
        "AGENTBATCH_TEST_PG_URL is not set: run the tests through tests/run.sh, which starts a throwaway PostgreSQL for them, or point it at a database where the test user may create databases",
    )
}

/// A new, empty database on the test server, as a URL.
pub fn fresh_database(name: &str) -> String {
    let base = server();
    let db = format!(
        "ab_{}_{}_{}",
        name,
        std::process::id(),
        Utc::now().timestamp_micros()
    );
    // On a thread of its own: an async test may call this, and a runtime cannot block
    // inside another.
    let (b, name) = (base.clone(), db.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&b, tokio_postgres::NoTls)
                .await
                .expect("the test server answers");
            tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("the test user may create databases");
        });
    })
    .join()
    .unwrap();
    let (head, tail) = base.split_at(base.rfind('/').expect("a URL with a database"));
    let query = tail.find('?').map(|i| &tail[i..]).unwrap_or("");
    format!("{head}/{db}{query}")
}

fn meta(run: &str, task: &str, expires_in: i64) -> EntryMeta {
    EntryMeta {
        run_id: run.into(),
        task_id: task.into(),
        expires_at: Utc::now() + chrono::Duration::seconds(expires_in),
        holder: None,
    }
}

/// A fixed sequence of ledger operations, and everything they let one observe.
fn exercise(s: &dyn CapStore) -> Vec<String> {
    let now = Utc::now();
    let mut seen = Vec::new();
    let mut note = |what: String| seen.push(what);
    let cap = d("1.00");
    let a = s
        .try_reserve("blue", "day:x", cap, d("0.40"), &meta("r1", "a", 600))
        .unwrap();
    let b = s
        .try_reserve("blue", "day:x", cap, d("0.50"), &meta("r1", "b", 600))
        .unwrap();
    let c = s
        .try_reserve("blue", "day:x", cap, d("0.20"), &meta("r1", "c", 600))
        .unwrap();
    note(format!(
        "reserved {} {} {}",
        a.is_some(),
        b.is_some(),
        c.is_some()
    ));
    note(format!("{:?}", s.totals("blue", "day:x", now).unwrap()));
    s.settle(a.unwrap(), d("0.123")).unwrap();
    s.release(b.unwrap()).unwrap();
    // Settling twice, or releasing what is settled, changes nothing.
    s.settle(a.unwrap(), d("0.999")).unwrap();
    s.release(a.unwrap()).unwrap();
    note(format!("{:?}", s.totals("blue", "day:x", now).unwrap()));
    let big = s
        .try_reserve("blue", "day:x", cap, d("0.877"), &meta("r2", "d", 600))
        .unwrap();
    let over = s
        .try_reserve("blue", "day:x", cap, d("0.000001"), &meta("r2", "e", 600))
        .unwrap();
    note(format!(
        "exact fit {} then nothing {}",
        big.is_some(),
        over.is_none()
    ));
    // Another team and period are apart.
    let red = s
        .try_reserve("red", "day:x", d("0.10"), d("0.10"), &meta("r2", "f", 600))
        .unwrap();
    note(format!("red {}", red.is_some()));
    // A dead run's reservations: still counted, now stale.
    let dead = s
        .try_reserve("red", "day:y", d("5"), d("2.5"), &meta("dead", "g", 600))
        .unwrap();
    note(format!("dead {}", dead.is_some()));
    note(format!(
        "abandoned {}",
        s.abandon_run("dead", Utc::now()).unwrap()
    ));
    note(format!(
        "abandoned again {}",
        s.abandon_run("dead", Utc::now()).unwrap()
    ));
    let later = Utc::now() + chrono::Duration::seconds(1);
    note(format!("{:?}", s.totals("red", "day:y", later).unwrap()));
    // An expired reservation is stale without any abandoning.
    let _ = s
        .try_reserve("red", "day:z", d("5"), d("1"), &meta("r3", "h", -1))
        .unwrap();
    note(format!("{:?}", s.totals("red", "day:z", later).unwrap()));
    // A worker's reservations go stale once it stops renewing them, and come back in
    // flight while it does; another holder's renewals leave them alone.
    let held = EntryMeta {
        holder: Some("w#1".into()),
        ..meta("r4", "i", -1)
    };
    let _ = s
        .try_reserve("red", "day:w", d("5"), d("0.3"), &held)
        .unwrap();
    let stale = |s: &dyn CapStore| s.totals("red", "day:w", Utc::now()).unwrap().stale;
    note(format!("held, not renewed: stale {}", stale(s)));
    let until = Utc::now() + chrono::Duration::seconds(600);
    note(format!("renewed {}", s.renew("w#1", until).unwrap()));
    note(format!("renewed: stale {}", stale(s)));
    note(format!(
        "another holder renewed {}",
        s.renew("w#2", until).unwrap()
    ));
    let past = Utc::now() - chrono::Duration::seconds(1);
    s.renew("w#1", past).unwrap();
    note(format!("renewed into the past: stale {}", stale(s)));
    // One request in two caps: all or none, and settled in both at once.
    let key = |team, cap: &str| store::CapKey {
        team,
        period: "run:r5",
        cap: d(cap),
    };
    let none = s
        .reserve(
            &[key("(run)", "1"), key("red", "0.2")],
            d("0.3"),
            &meta("r5", "j", 600),
        )
        .unwrap();
    note(format!("over one cap: {none:?}"));
    let both = s
        .reserve(
            &[key("(run)", "1"), key("red", "0.5")],
            d("0.3"),
            &meta("r5", "j", 600),
        )
        .unwrap()
        .unwrap();
    s.finish(&both, Some(d("0.05"))).unwrap();
    s.finish(&both, None).unwrap();
    for team in ["(run)", "red"] {
        note(format!(
            "{team}: {:?}",
            s.totals(team, "run:r5", Utc::now()).unwrap()
        ));
    }
    // Slices: granted as the cap has room, settlements written per task, an
    // expired slice's idle part back and its armed part spent, never renewed.
    let change =
        |id, size: &str, min: &str, armed: &str, settled: &[(&str, &str)]| store::SliceChange {
            team: "green".into(),
            period: "day:s".into(),
            cap: d("1"),
            period_cap: true,
            owner: store::slice_task("green", ""),
            seq: 0,
            id,
            settled: settled.iter().map(|(t, a)| (t.to_string(), d(a))).collect(),
            size: d(size),
            min_size: d(min),
            armed: d(armed),
        };
    let lease = |holder: &str, ms| EntryMeta {
        holder: Some(holder.into()),
        expires_at: Utc::now() + chrono::Duration::milliseconds(ms),
        ..meta("r6", store::SLICE_TASK, 0)
    };
    let shown = |g: &Option<Vec<store::SliceGrant>>| {
        g.as_ref().map(|g| {
            g.iter()
                .map(|g| format!("{} {} {} {:?}", g.id.is_some(), g.size, g.armed, g.totals))
                .collect::<Vec<_>>()
        })
    };
    let a = s
        .slices(
            &[change(None, "0.6", "0.1", "0.2", &[])],
            &lease("s#1", 60_000),
        )
        .unwrap();
    note(format!("slice a {:?}", shown(&a)));
    let a_id = a.and_then(|g| g[0].id);
    let b = s
        .slices(
            &[change(None, "0.6", "0.3", "0.3", &[])],
            &lease("s#2", 300),
        )
        .unwrap();
    note(format!("slice b {:?}", shown(&b)));
    let c = s
        .slices(
            &[change(None, "0.2", "0.01", "0.01", &[])],
            &lease("s#3", 60_000),
        )
        .unwrap();
    note(format!("slice c {:?}", shown(&c)));
    let a2 = s
        .slices(
            &[store::SliceChange {
                seq: 1,
                ..change(a_id, "0.1", "0.1", "0.05", &[("x", "0.1"), ("y", "0.05")])
            }],
            &lease("s#1", 60_000),
        )
        .unwrap();
    note(format!("slice a settled {:?}", shown(&a2)));
    note(format!(
        "negative refused {}",
        s.slices(
            &[store::SliceChange {
                seq: 2,
                ..change(a_id, "0.1", "0.1", "-0.05", &[])
            }],
            &lease("s#1", 60_000)
        )
        .is_err()
    ));
    note(format!(
        "a as stored {:?}",
        s.slice_state("s#1", "green", "day:s", &store::slice_task("green", ""))
            .unwrap()
            .map(|st| (st.seq, st.amount, st.idle))
    ));
    std::thread::sleep(std::time::Duration::from_millis(400));
    note(format!(
        "b expired: {:?}",
        s.totals("green", "day:s", Utc::now()).unwrap()
    ));
    s.renew("s#2", Utc::now() + chrono::Duration::seconds(60))
        .unwrap();
    note(format!(
        "b renewed: {:?}",
        s.totals("green", "day:s", Utc::now()).unwrap()
    ));
    // An answer billed past its worst case: settled in full, beyond the slice.
    let a3 = s
        .slices(
            &[store::SliceChange {
                seq: 2,
                ..change(a_id, "0", "0", "0", &[("z", "0.12")])
            }],
            &lease("s#1", 60_000),
        )
        .unwrap();
    note(format!("slice a ended {:?}", shown(&a3)));
    for run in ["r1", "r2", "r4", "r5", "r6", "none"] {
        note(format!("{run}: {:?}", s.run_charges(run).unwrap()));
    }
    for r in s.report(None, later).unwrap() {
        note(format!(
            "{} {} {:?} {:?} {}",
            r.team, r.period, r.cap, r.totals, r.entries
        ));
    }
    note(format!("{}", s.report(Some("blue"), later).unwrap().len()));
    seen
}

#[test]
fn postgres_answers_every_ledger_operation_as_the_sqlite_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(&dir.path().join("ledger.sqlite")).unwrap();
    let url = fresh_database("same");
    let pg = open_store(std::path::Path::new(&url)).unwrap();
    let (want, got) = (exercise(&sqlite), exercise(pg.as_ref()));
    assert_eq!(got, want);
    assert!(want[0] == "reserved true true false", "{want:?}");
    for line in [
        "held, not renewed: stale 0.3",
        "renewed 1",
        "renewed: stale 0",
        "another holder renewed 0",
        "renewed into the past: stale 0.3",
    ] {
        assert!(want.iter().any(|w| w == line), "{line} in {want:#?}");
    }
    for line in [
        "negative refused true",
        "a as stored Some((2, 0.1, 0.05))",
        "b expired: PeriodTotals { settled: 0.15, reserved: 0.4, stale: 0.3, cap_set: None }",
        "b renewed: PeriodTotals { settled: 0.15, reserved: 0.4, stale: 0.3, cap_set: None }",
        "slice c None",
        "slice a ended Some([\"false 0 0 PeriodTotals { settled: 0.27, reserved: 0.3, stale: 0.3, cap_set: None }\"])",
    ] {
        assert!(want.iter().any(|w| w == line), "{line} in {want:#?}");
    }
    let r2 = want.iter().find(|w| w.starts_with("r2: ")).unwrap();
    assert!(
        r2.contains("task_id: \"d\", team: \"blue\", period: \"day:x\", settled: 0, open: 0.877")
            && r2.contains(
                "task_id: \"f\", team: \"red\", period: \"day:x\", settled: 0, open: 0.1"
            ),
        "{r2}"
    );
}

#[test]
fn concurrent_writers_never_pass_the_cap_and_settle_exactly() {
    let url = fresh_database("race");
    let cap = d("3.00");
    // Four sets of connections, as four machines would have (a process shares one set
    // per URL: the application names tell them apart).
    let stores: Vec<Arc<dyn CapStore>> = (0..4)
        .map(|i| {
            let url = format!("{url}?application_name=writer-{i}");
            open_store(std::path::Path::new(&url)).unwrap()
        })
        .collect();
    let threads: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut kept = Decimal::ZERO;
                for k in 0..60u32 {
                    let amount = Decimal::new(i64::from(k % 7 + 1) * 1000 + i as i64, 5);
                    if let Some(id) = s
                        .try_reserve(
                            "t",
                            "day:r",
                            cap,
                            amount,
                            &meta("r", &format!("{i}-{k}"), 600),
                        )
                        .unwrap()
                    {
                        // Half is spent, half comes back.
                        let spent = (amount / Decimal::TWO).round_dp(5);
                        s.settle(id, spent).unwrap();
                        kept += spent;
                    }
                }
                kept
            })
        })
        .collect();
    let kept: Decimal = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let t = stores[0].totals("t", "day:r", Utc::now()).unwrap();
    assert_eq!(t.settled, kept.normalize());
    assert_eq!(t.reserved, Decimal::ZERO);
    assert!(t.settled <= cap);
}

#[test]
fn a_database_of_a_newer_agentbatch_is_refused_and_an_empty_one_made_current() {
    let url = fresh_database("schema");
    let s = open_store(std::path::Path::new(&url)).unwrap();
    assert!(s.report(None, Utc::now()).unwrap().is_empty());
    drop(s);
    // Opening again is a no-op; a version from the future is refused by name.
    open_store(std::path::Path::new(&url)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("UPDATE agentbatch_schema SET version = 99")
            .await
            .unwrap();
    });
    let err = open_store(std::path::Path::new(&url))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("version 99") && err.contains("newer"), "{err}");
}

/// The job every runner process of the shared-cap test runs: tasks that loop until
/// the team's day cap stops them.
const LOOP: &str = "{ latency: 10ms, repeat_last: true, turns: [ { content: [ { text: working }, { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 200 } } ] }";

#[test]
fn three_runner_processes_share_one_team_cap_in_postgres() {
    let url = fresh_database("shared");
    let case = Case::new();
    let tasks: String = (0..30)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: go }}\n"))
        .collect();
    case.write(
        "job.yaml",
        &format!(
            "name: shared\nconcurrency: 15\nteams:\n  platform: {{ cap: {{ usd: 1.00, period: day }} }}\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 200, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{tasks}"
        ),
    );
    let spawn = |id: &str| {
        bin()
            .args(["run", "job.yaml", "--quiet", "--run-id", id])
            .env("AGENTBATCH_LEDGER_URL", &url)
            .current_dir(case.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let runs = ["a", "b", "c"];
    let children: Vec<_> = runs.iter().map(|id| spawn(id)).collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let spent: Decimal = runs
        .iter()
        .flat_map(|id| read_csv(&case.path(&format!("reports/{id}/results.csv"))))
        .map(|r| d(&r["cost_usd"]))
        .sum();
    eprintln!("three runner processes spent ${spent} of a $1.00 team cap");
    assert!(spent <= d("1.00"), "the three runs together spent {spent}");
    assert!(
        spent >= d("0.97"),
        "the cap should be at least 97% used: {spent}"
    );
    // Each process ran tasks, and stopped them on the team's budget.
    for id in runs {
        let rows = read_csv(&case.path(&format!("reports/{id}/results.csv")));
        assert!(
            rows.iter().any(|r| r["stop_reason"] == "team_budget"),
            "{id}"
        );
    }
    // The ledger, read from any machine, holds exactly what the reports say.
    let out = bin()
        .args(["ledger", "--json"])
        .env("AGENTBATCH_LEDGER_URL", &url)
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["team"], "platform");
    assert_eq!(d(rows[0]["totals"]["settled"].as_str().unwrap()), spent);
    assert_eq!(
        d(rows[0]["totals"]["reserved"].as_str().unwrap()),
        Decimal::ZERO
    );
    // No report holds the database's URL with a password.
    for id in runs {
        let json = std::fs::read_to_string(case.path(&format!("reports/{id}/run.json"))).unwrap();
        assert!(!json.contains("password"), "{json}");
    }
}

#[test]
fn a_password_in_the_job_files_ledger_url_is_refused() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: p\nledger: postgres://bob:s3cret@127.0.0.1:5432/ab\nteams:\n  t: { cap: { usd: 1, period: day } }\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\n  sim: { turns: [ { content: [ { text: hi } ] } ] }\ntasks:\n  - { id: a, prompt: p }\n",
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ledger") && err.contains("PGPASSWORD"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

/// The test server's CA certificate (tests/run.sh turns TLS on and makes the role
/// tls_only, which the server lets in over TLS only).
fn test_ca() -> String {
    std::env::var("AGENTBATCH_TEST_PG_CA").expect(
        "AGENTBATCH_TEST_PG_CA is not set: run the tests through tests/run.sh, or point it at the CA certificate of the server AGENTBATCH_TEST_PG_URL names, with ssl on and a superuser role tls_only allowed by hostssl lines only",
    )
}

/// Connects as tls_only with `query` after `?`, to `host`, and says whether the
/// session is encrypted (or the error, as the user would read it).
fn tls_session(db_url: &str, host: &str, query: &str) -> Result<bool, String> {
    use agentbatch::govern::pg::Pg;
    let rest = db_url.split_once("://").unwrap().1;
    let (_, at_host) = rest.split_once('@').unwrap();
    let port_and_db = at_host.split_once(':').unwrap().1;
    let port_and_db = port_and_db.split('?').next().unwrap();
    let url = format!("postgres://tls_only@{host}:{port_and_db}?{query}");
    let pg = Pg::connect(&url).map_err(|e| e.to_string())?;
    pg.run(|c| {
        Box::pin(async move {
            let row = c
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await?;
            Ok(row.get::<_, bool>(0))
        })
    })
    .map_err(|e| e.to_string())
}

#[test]
fn tls_modes_mean_what_they_mean_to_libpq() {
    let ca = test_ca();
    let db = fresh_database("tls");
    // Plain TCP is refused for this role, so each success below was encrypted.
    let e = tls_session(&db, "127.0.0.1", "sslmode=disable").unwrap_err();
    assert!(e.contains("pg_hba.conf"), "{e}");
    for query in ["", "sslmode=prefer", "sslmode=require", "sslmode=allow"] {
        assert_eq!(tls_session(&db, "127.0.0.1", query), Ok(true), "{query}");
    }
    // The chain is checked against the CA given; the name only in verify-full (the
    // certificate is for localhost, not for 127.0.0.1).
    let with_ca = |mode: &str| format!("sslmode={mode}&sslrootcert={ca}");
    assert_eq!(
        tls_session(&db, "localhost", &with_ca("verify-full")),
        Ok(true)
    );
    assert_eq!(
        tls_session(&db, "127.0.0.1", &with_ca("verify-ca")),
        Ok(true)
    );
    let e = tls_session(&db, "127.0.0.1", &with_ca("verify-full")).unwrap_err();
    assert!(e.contains("not for this host name"), "{e}");
    // Without the CA, the system's roots do not know the test CA.
    let e = tls_session(&db, "localhost", "sslmode=verify-full&sslrootcert=system").unwrap_err();
    assert!(e.contains("name its CA file with sslrootcert=PATH"), "{e}");
    // A CA that did not sign the server's certificate fails require too (libpq: a root
    // certificate makes require check the chain).
    let other = tempfile::tempdir().unwrap();
    let stranger = other.path().join("other-ca.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=stranger",
        ])
        .arg("-keyout")
        .arg(other.path().join("k.pem"))
        .arg("-out")
        .arg(&stranger)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let e = tls_session(
        &db,
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={}", stranger.display()),
    )
    .unwrap_err();
    assert!(e.contains("invalid peer certificate"), "{e}");
    let e = tls_session(&db, "127.0.0.1", "sslmode=require&sslkey=/k.pem").unwrap_err();
    assert!(e.contains("client certificates are not supported"), "{e}");
}

#[test]
fn the_command_line_takes_libpq_tls_settings_from_the_environment() {
    let ca = test_ca();
    let db = fresh_database("tlscli");
    let port_db = db.rsplit_once(':').unwrap().1;
    let url = format!("postgres://tls_only@localhost:{port_db}");
    let ledger = |mode: &str| {
        bin()
            .args(["ledger", "--json", "--ledger", &url])
            .env("PGSSLMODE", mode)
            .env("PGSSLROOTCERT", &ca)
            .output()
            .unwrap()
    };
    let out = ledger("verify-full");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ledger("disable");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pg_hba.conf") && err.contains("tls_only@localhost"),
        "{err}"
    );
}
