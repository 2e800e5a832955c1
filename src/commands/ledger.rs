//! `agentbatch ledger`: what each team spent per period, from the persistent ledger (a
//! SQLite file or a PostgreSQL database).

use std::path::Path;

/// Sets team `team`'s period cap in the ledger; the exit code.
pub fn set_cap(team: &str, usd: rust_decimal::Decimal, path: &Path) -> u8 {
    let url = path
        .to_str()
        .is_some_and(crate::vocab::values::is_postgres_url);
    if !url && !path.exists() {
        eprintln!(
            "agentbatch ledger set-cap: {} does not exist: no run with a team period cap has used it (pass --ledger PATH)",
            path.display()
        );
        return 2;
    }
    match crate::govern::open_store(path).and_then(|s| s.set_cap(team, usd, chrono::Utc::now())) {
        Ok(()) => {
            println!(
                "team {team}'s period cap is ${} in {} from now on, for every run on it",
                usd.normalize(),
                path.display()
            );
            0
        }
        Err(e) => {
            eprintln!("agentbatch ledger set-cap: {e}");
            1
        }
    }
}

/// Prints what each team spent per period; the exit code.
pub fn report(team: Option<&str>, path: &Path, json: bool) -> u8 {
    let url = path
        .to_str()
        .is_some_and(crate::vocab::values::is_postgres_url);
    if !url && !path.exists() {
        eprintln!(
            "agentbatch ledger: {} does not exist: no run with a team period cap has used it (pass --ledger PATH to read another)",
            path.display()
        );
        return 2;
    }
    let rows =
        match crate::govern::open_store(path).and_then(|s| s.report(team, chrono::Utc::now())) {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("agentbatch ledger: {e}");
                return 1;
            }
        };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return 0;
    }
    println!(
        "{:<16} {:<18} {:>12} {:>14} {:>14} {:>12} {:>8}",
        "team", "period", "cap_usd", "spent_usd", "unsettled_usd", "stale_usd", "entries"
    );
    for r in &rows {
        let money = |d: rust_decimal::Decimal| format!("{:.6}", d);
        println!(
            "{:<16} {:<18} {:>12} {:>14} {:>14} {:>12} {:>8}",
            r.team,
            r.period,
            r.cap.map_or("-".into(), |c| c.normalize().to_string()),
            money(r.totals.settled),
            money(r.totals.reserved),
            money(r.totals.stale),
            r.entries
        );
    }
    if rows.is_empty() {
        println!(
            "(no spend recorded{})",
            team.map(|t| format!(" for team {t}")).unwrap_or_default()
        );
    }
    0
}
