//! The run's and teams' pools kept in this process's memory (their `max_cost_usd`),
//! which the ledger reserves in beside the caps kept in a store.

use std::collections::HashMap;

use rust_decimal::Decimal;

/// One pool: its cap, what was spent and what requests in flight hold.
#[derive(Debug, Default)]
pub(super) struct Pool {
    pub(super) cap: Option<Decimal>,
    pub(super) spent: Decimal,
    pub(super) reserved: Decimal,
}

#[derive(Debug)]
pub(super) struct Pools {
    pub(super) run: Pool,
    pub(super) teams: HashMap<String, Pool>,
}

impl Pools {
    /// The run's pool and the team's, if it has one.
    pub(super) fn chain_mut(&mut self, team: Option<&str>) -> Vec<&mut Pool> {
        let Pools { run, teams } = self;
        let mut v = vec![run];
        if let Some(t) = team.and_then(|t| teams.get_mut(t)) {
            v.push(t);
        }
        v
    }
}
