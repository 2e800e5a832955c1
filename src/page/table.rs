//! The task table's data, compact enough for 10,000 rows: one array per row, and the
//! values that repeat (outcome, stop reason, team, variant) as indexes into lists.

use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;

use crate::report::ResultRow;

/// Characters of a stop detail kept in the table's data.
const DETAIL_CHARS: usize = 300;

/// Indexes of the values of one repeating column.
#[derive(Default)]
struct Levels(Vec<String>);

impl Levels {
    fn index(&mut self, v: &str) -> usize {
        match self.0.iter().position(|x| x == v) {
            Some(i) => i,
            None => {
                self.0.push(v.to_string());
                self.0.len() - 1
            }
        }
    }
}

/// The columns of a row array, in order; the page's script reads them by these names.
pub(super) const COLUMNS: [&str; 19] = [
    "task", "variant", "epoch", "team", "outcome", "stop", "turns", "calls", "denied", "errors",
    "retries", "cost", "in", "out", "wall", "detail", "model", "env", "image",
];

/// The table's data, serialized straight to JSON (no tree of values for 10,000 rows).
#[derive(Serialize)]
pub(super) struct Data<'a> {
    columns: [&'static str; 19],
    outcome: Vec<String>,
    stop: Vec<String>,
    team: Vec<String>,
    variant: Vec<String>,
    model: Vec<String>,
    image: Vec<String>,
    rows: Vec<Row<'a>>,
}

/// One row: the values of [`COLUMNS`] in order, a JSON array.
#[derive(Serialize)]
pub(super) struct Row<'a>(
    &'a str,
    usize,
    u32,
    usize,
    usize,
    usize,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<f64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    String,
    usize,
    Option<u64>,
    usize,
);

/// The table's data.
pub(super) fn data(rows: &[ResultRow]) -> Data<'_> {
    let (mut outcomes, mut stops, mut teams, mut variants, mut models) = Default::default();
    let mut images = Levels::default();
    let out: Vec<Row> = rows
        .iter()
        .map(|r| {
            row(
                r,
                &mut outcomes,
                &mut stops,
                &mut teams,
                &mut variants,
                &mut models,
                &mut images,
            )
        })
        .collect();
    let Levels(outcomes) = outcomes;
    let Levels(stops) = stops;
    let Levels(teams) = teams;
    let Levels(variants) = variants;
    let Levels(models) = models;
    let Levels(images) = images;
    Data {
        columns: COLUMNS,
        outcome: outcomes,
        stop: stops,
        team: teams,
        variant: variants,
        model: models,
        image: images,
        rows: out,
    }
}

fn row<'a>(
    r: &'a ResultRow,
    outcomes: &mut Levels,
    stops: &mut Levels,
    teams: &mut Levels,
    variants: &mut Levels,
    models: &mut Levels,
    images: &mut Levels,
) -> Row<'a> {
    let outcome = r.outcome.map_or("", |o| o.as_str());
    let detail = crate::text::prefix(&r.stop_detail, DETAIL_CHARS);
    Row(
        &r.task_id,
        variants.index(&r.variant),
        r.epoch,
        teams.index(&r.team),
        outcomes.index(outcome),
        stops.index(&r.stop_reason),
        r.turns,
        r.tool_calls,
        r.denied_calls,
        r.tool_errors,
        r.retries,
        r.cost_usd.and_then(|c| c.to_f64()),
        r.input_tokens,
        r.output_tokens,
        r.wall_ms,
        detail,
        models.index(&r.model),
        r.environment_ms,
        images.index(&r.environment),
    )
}
