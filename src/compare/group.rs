//! Which group each row belongs to and which unit it is a verdict on. Rows of two groups
//! are paired when they are on the same unit: the same task and epoch, plus, with
//! `--by AXIS`, the same values of every other axis.

use std::collections::{BTreeMap, BTreeSet};

use super::read::{Row, Run};
use super::CompareError;

/// The pseudo-axis that groups by run folder.
pub const RUN_AXIS: &str = "run";

/// What a verdict is about; rows on equal units are paired.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Unit {
    pub task_id: String,
    pub epoch: u32,
    /// The values of the axes not compared, `axis=value` joined by commas (empty
    /// without `--by`).
    pub others: String,
}

/// The rows of one side of the comparison, one per unit.
#[derive(Debug)]
pub(crate) struct Group<'a> {
    pub label: String,
    pub units: BTreeMap<Unit, &'a Row>,
}

/// Splits the runs' rows into groups, in a stable order: by run folder as given, then
/// by label. Rows repeated on a unit (a resumed run) keep the last one, with a warning.
pub(crate) fn group<'a>(
    runs: &'a [Run],
    by: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Group<'a>>, CompareError> {
    let axes: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.axes.iter().map(String::as_str))
        .collect();
    if let Some(axis) = by {
        if axis != RUN_AXIS && !axes.contains(axis) {
            return Err(CompareError::UnknownAxis {
                axis: axis.to_string(),
                available: available(&axes),
            });
        }
    }

    let mut groups: BTreeMap<(usize, String), Group<'a>> = BTreeMap::new();
    for (run_index, run) in runs.iter().enumerate() {
        let mut missing_axis = 0usize;
        for row in &run.rows {
            let Some((order, label)) = label(row, run_index, runs.len(), by) else {
                missing_axis += 1;
                continue;
            };
            let unit = Unit {
                task_id: row.task_id.clone(),
                epoch: row.epoch,
                others: others(row, by),
            };
            let group = groups
                .entry((order, label.clone()))
                .or_insert_with(|| Group {
                    label,
                    units: BTreeMap::new(),
                });
            if let Some(earlier) = group.units.insert(unit.clone(), row) {
                warnings.push(format!(
                    "{}: {} has several rows; using the last, {}:{} (over {}:{})",
                    group.label,
                    describe(&unit),
                    runs[row.file].results.display(),
                    row.line,
                    runs[earlier.file].results.display(),
                    earlier.line,
                ));
            }
        }
        if missing_axis > 0 {
            warnings.push(format!(
                "{}: left out {missing_axis} row(s) with no value for axis \"{}\"",
                run.results.display(),
                by.unwrap_or_default()
            ));
        }
    }

    let groups: Vec<Group<'a>> = groups.into_values().collect();
    if groups.len() < 2 {
        return Err(CompareError::TooFewGroups {
            found: groups.iter().map(|g| g.label.clone()).collect(),
            hint: too_few_hint(runs.len(), by, &axes),
        });
    }
    Ok(groups)
}

/// A unit in words, for warnings and lists: `task@epoch`, with the other axes in
/// brackets when there are any.
pub(crate) fn describe(unit: &Unit) -> String {
    if unit.others.is_empty() {
        format!("{}@{}", unit.task_id, unit.epoch)
    } else {
        format!("{}@{}[{}]", unit.task_id, unit.epoch, unit.others)
    }
}

/// The row's group label and its place in the order (the run's position when groups
/// follow runs); None when the row has no value for the compared axis.
fn label(row: &Row, run_index: usize, runs: usize, by: Option<&str>) -> Option<(usize, String)> {
    match by {
        None if runs == 1 => Some((
            0,
            if row.variant.is_empty() {
                NO_VARIANT.to_string()
            } else {
                row.variant.clone()
            },
        )),
        None if row.variant.is_empty() => Some((run_index, format!("run={}", row.run_id))),
        None => Some((run_index, format!("run={},{}", row.run_id, row.variant))),
        Some(RUN_AXIS) => Some((run_index, format!("run={}", row.run_id))),
        Some(axis) => row.axes.get(axis).map(|v| (0, format!("{axis}={v}"))),
    }
}

/// The label of a run's rows when its job has no matrix.
const NO_VARIANT: &str = "(no variant)";

fn others(row: &Row, by: Option<&str>) -> String {
    let Some(by) = by else {
        return String::new();
    };
    row.axes
        .iter()
        .filter(|(axis, _)| axis.as_str() != by)
        .map(|(axis, value)| format!("{axis}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn available(axes: &BTreeSet<&str>) -> Vec<String> {
    std::iter::once(RUN_AXIS)
        .chain(axes.iter().copied())
        .map(str::to_string)
        .collect()
}

fn too_few_hint(runs: usize, by: Option<&str>, axes: &BTreeSet<&str>) -> String {
    match by {
        None if runs == 1 && axes.is_empty() => {
            "this run's job has no matrix: give two or more run folders".to_string()
        }
        None if runs == 1 => format!(
            "give two or more run folders, or compare by an axis (--by {})",
            available(axes).join(", --by ")
        ),
        None => "the runs hold a single group: give runs with different settings".to_string(),
        Some(RUN_AXIS) => "--by run needs two or more run folders".to_string(),
        Some(axis) => format!(
            "axis \"{axis}\" has a single value in these runs; compare by another axis ({}) or give more runs",
            available(axes).join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::vocab::stop::Outcome;

    fn row(run_id: &str, task: &str, epoch: u32, axes: &[(&str, &str)], line: u64) -> Row {
        let axes: BTreeMap<String, String> = axes
            .iter()
            .map(|(a, v)| (a.to_string(), v.to_string()))
            .collect();
        let variant = axes
            .iter()
            .map(|(a, v)| format!("{a}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        Row {
            run_id: run_id.into(),
            task_id: task.into(),
            epoch,
            variant,
            axes,
            model: "m".into(),
            outcome: Outcome::Pass,
            stop_reason: "completed".into(),
            cost: None,
            turns: None,
            wall_ms: None,
            input_tokens: None,
            cache_saved: None,
            output_tokens: None,
            file: 0,
            line,
        }
    }

    fn run(rows: Vec<Row>) -> Run {
        let axes = rows.iter().flat_map(|r| r.axes.keys().cloned()).collect();
        Run {
            results: PathBuf::from("r/results.csv"),
            rows,
            axes,
        }
    }

    fn matrix_run() -> Run {
        let mut rows = Vec::new();
        let mut line = 2;
        for model in ["b-model", "a-model"] {
            for toolset in ["min", "coding"] {
                for epoch in [1, 2] {
                    rows.push(row(
                        "r1",
                        "t1",
                        epoch,
                        &[("model", model), ("toolset", toolset)],
                        line,
                    ));
                    line += 1;
                }
            }
        }
        run(rows)
    }

    fn labels(groups: &[Group]) -> Vec<String> {
        groups.iter().map(|g| g.label.clone()).collect()
    }

    #[test]
    fn one_run_groups_by_variant_in_sorted_order() {
        let runs = [matrix_run()];
        let mut w = Vec::new();
        let groups = group(&runs, None, &mut w).unwrap();
        assert_eq!(
            labels(&groups),
            [
                "model=a-model,toolset=coding",
                "model=a-model,toolset=min",
                "model=b-model,toolset=coding",
                "model=b-model,toolset=min"
            ]
        );
        let units: Vec<String> = groups[0].units.keys().map(describe).collect();
        assert_eq!(units, ["t1@1", "t1@2"]);
        assert!(w.is_empty());
    }

    #[test]
    fn by_axis_pairs_on_the_other_axes() {
        let runs = [matrix_run()];
        let mut w = Vec::new();
        let groups = group(&runs, Some("toolset"), &mut w).unwrap();
        assert_eq!(labels(&groups), ["toolset=coding", "toolset=min"]);
        let units: Vec<String> = groups[1].units.keys().map(describe).collect();
        assert_eq!(
            units,
            [
                "t1@1[model=a-model]",
                "t1@1[model=b-model]",
                "t1@2[model=a-model]",
                "t1@2[model=b-model]"
            ]
        );
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn several_runs_group_by_run_then_variant() {
        let runs = [
            run(vec![row("r2", "t1", 1, &[], 2)]),
            run(vec![row("r1", "t1", 1, &[("toolset", "x")], 2)]),
        ];
        let mut w = Vec::new();
        let groups = group(&runs, None, &mut w).unwrap();
        assert_eq!(labels(&groups), ["run=r2", "run=r1,toolset=x"]);
        let groups = group(&runs, Some("run"), &mut w).unwrap();
        assert_eq!(labels(&groups), ["run=r2", "run=r1"]);
        // --by run pairs on the matrix axes, so these two rows are different units.
        assert_eq!(
            groups[1].units.keys().next().map(describe).unwrap(),
            "t1@1[toolset=x]"
        );
    }

    #[test]
    fn repeated_units_keep_the_last_row_and_warn() {
        let mut first = row("r1", "t1", 1, &[], 2);
        first.outcome = Outcome::Error;
        let runs = [
            run(vec![first, row("r1", "t1", 1, &[], 5)]),
            run(vec![row("r2", "t1", 1, &[], 2)]),
        ];
        let mut w = Vec::new();
        let groups = group(&runs, None, &mut w).unwrap();
        let kept = groups[0].units.values().next().unwrap();
        assert_eq!((kept.line, kept.outcome), (5, Outcome::Pass));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains(
                "t1@1 has several rows; using the last, r/results.csv:5 (over r/results.csv:2)"
            ),
            "{w:?}"
        );
    }

    #[test]
    fn unknown_axes_and_single_groups_are_errors_that_list_the_choices() {
        let runs = [matrix_run()];
        let mut w = Vec::new();
        let e = group(&runs, Some("temperature"), &mut w)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"temperature\""), "{e}");
        assert!(e.contains("run, model, toolset"), "{e}");
        let e = group(&runs, Some("run"), &mut w).unwrap_err().to_string();
        assert!(e.contains("--by run needs two or more run folders"), "{e}");
        let plain = [run(vec![row("r1", "t1", 1, &[], 2)])];
        let e = group(&plain, None, &mut w).unwrap_err().to_string();
        assert!(e.contains("no matrix"), "{e}");
    }

    #[test]
    fn rows_without_the_axis_are_left_out_with_a_warning() {
        let runs = [matrix_run(), run(vec![row("r2", "t1", 1, &[], 2)])];
        let mut w = Vec::new();
        let groups = group(&runs, Some("model"), &mut w).unwrap();
        assert_eq!(labels(&groups), ["model=a-model", "model=b-model"]);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("left out 1 row(s) with no value for axis \"model\""),
            "{w:?}"
        );
    }
}
