//! The `matrix:` and `epochs:` of a job: every combination of axis values is a variant,
//! applied over `defaults` so that the rest of expansion (and its checks) treats a
//! variant's values like any default. Pure functions; expand.rs reports the errors.

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::schema::TaskFields;
use crate::vocab::bounds;

/// One combination of axis values.
#[derive(Debug, Clone, Default)]
pub(super) struct Variant {
    /// `axis=value,...` sorted by axis; empty without a matrix.
    pub label: String,
    /// (axis, value as shown).
    pub axes: Vec<(String, String)>,
    /// (axis, index of the value in the axis's list): where errors point.
    pub picks: Vec<(String, usize)>,
    /// The label made safe for file names and URLs.
    pub slug: String,
    /// `defaults` with this variant's values set.
    pub defaults: TaskFields,
}

/// An axis value as it appears in labels and CSV columns: scalars as written, anything
/// else as compact JSON.
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    }
}

fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').chars().take(80).collect()
}

fn path_of(axis: &str) -> Vec<&str> {
    axis.split('.').collect()
}

/// Task fields merged with `defaults` key by key rather than replacing them whole.
const MERGED_BY_KEY: [&str; 4] = ["limits", "env", "sandbox", "environment"];

/// The field a task sets (as written in the job file) that would decide what an axis
/// names, if any: the axis's own field, a parent of it that replaces the default whole
/// (`reasoning` for `reasoning.effort`), or `tools` and `toolset`, which go together.
/// Then the matrix and the task disagree about who decides it.
pub(super) fn task_conflict(task: &Value, axis: &str) -> Option<String> {
    let path = path_of(axis);
    let top = path.first()?;
    if matches!(*top, "tools" | "toolset") {
        return ["tools", "toolset"]
            .into_iter()
            .find(|f| task.get(*f).is_some())
            .map(str::to_string);
    }
    let mut v = task;
    for (i, seg) in path.iter().enumerate() {
        v = v.get(*seg)?;
        let whole = i + 1 == path.len() || (i == 0 && !MERGED_BY_KEY.contains(top));
        if whole {
            return Some(path[..=i].join("."));
        }
    }
    None
}

fn set_path(root: &mut Value, path: &[&str], value: Value) {
    let mut cur = root;
    for (i, seg) in path.iter().enumerate() {
        if !matches!(cur, Value::Mapping(_)) {
            *cur = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(m) = cur else { return };
        let key = Value::String((*seg).to_string());
        if i + 1 == path.len() {
            m.insert(key, value);
            return;
        }
        cur = m.entry(key).or_insert(Value::Mapping(Mapping::new()));
    }
}

/// A problem with the matrix: the path under `matrix` (axis, and value index if one
/// value is at fault) and the message.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MatrixError {
    pub axis: String,
    pub index: Option<usize>,
    pub message: String,
}

/// Every variant, in a fixed order (the last axis varies fastest). Without a matrix,
/// one variant with the defaults as written.
pub(super) fn variants(
    matrix: &BTreeMap<String, Vec<Value>>,
    defaults: &Value,
    parsed: &TaskFields,
) -> Result<Vec<Variant>, Vec<MatrixError>> {
    let errors = check_axes(matrix);
    if !errors.is_empty() {
        return Err(errors);
    }
    // The defaults as written in the file (re-encoding the parsed fields would not
    // always read back the same).
    let base = match defaults {
        Value::Null => Value::Mapping(Mapping::new()),
        v => v.clone(),
    };
    if matrix.is_empty() {
        return Ok(vec![Variant {
            defaults: parsed.clone(),
            ..Variant::default()
        }]);
    }
    let axes: Vec<(&String, &Vec<Value>)> = matrix.iter().collect();
    let total = axes
        .iter()
        .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()))
        .filter(|n| *n as u64 <= bounds::VARIANTS);
    let Some(total) = total else {
        let sizes: Vec<String> = axes.iter().map(|(_, v)| v.len().to_string()).collect();
        return Err(vec![matrix_error(
            axes[0].0,
            None,
            format!(
                "the matrix has {} combinations: at most {} variants in one job",
                sizes.join(" x "),
                bounds::VARIANTS
            ),
        )]);
    };
    let mut out = Vec::with_capacity(total);
    // An axis value that does not fit its field is reported once, not once per variant.
    let mut bad: BTreeMap<(String, usize), String> = BTreeMap::new();
    for n in 0..total {
        out.extend(variant(n, &axes, matrix, &base, &mut bad));
    }
    if !bad.is_empty() {
        return Err(bad
            .into_iter()
            .map(|((axis, i), m)| matrix_error(&axis, Some(i), m))
            .collect());
    }
    unique_slugs(&mut out);
    Ok(out)
}

fn matrix_error(axis: &str, index: Option<usize>, message: String) -> MatrixError {
    MatrixError {
        axis: axis.to_string(),
        index,
        message,
    }
}

/// What is wrong with the axes themselves: a path that is not one, `id`, no values, a
/// value twice.
fn check_axes(matrix: &BTreeMap<String, Vec<Value>>) -> Vec<MatrixError> {
    let mut errors = Vec::new();
    let err = matrix_error;
    for (axis, values) in matrix {
        let path = path_of(axis);
        if path.iter().any(|s| s.is_empty()) {
            errors.push(err(
                axis,
                None,
                "an axis is a task field, or a dotted path into one such as `limits.max_turns`"
                    .into(),
            ));
        } else if path[0] == "id" {
            errors.push(err(
                axis,
                None,
                "`id` cannot be an axis: a task keeps its id in every variant".into(),
            ));
        } else if values.is_empty() {
            errors.push(err(
                axis,
                None,
                "the axis has no values: give it a list of at least one".into(),
            ));
        }
        for (i, v) in values.iter().enumerate() {
            if values[..i].iter().any(|w| show(w) == show(v)) {
                errors.push(err(
                    axis,
                    Some(i),
                    format!("the value {} appears twice", show(v)),
                ));
            }
        }
    }
    errors
}

/// Variant number `n` of the grid (the last axis varies fastest): `base` with its
/// values set. None when its fields do not read; a value that does not fit its field
/// alone goes into `bad`.
fn variant(
    n: usize,
    axes: &[(&String, &Vec<Value>)],
    matrix: &BTreeMap<String, Vec<Value>>,
    base: &Value,
    bad: &mut BTreeMap<(String, usize), String>,
) -> Option<Variant> {
    let mut rest = n;
    let mut picks = Vec::with_capacity(axes.len());
    for (axis, values) in axes.iter().rev() {
        picks.push(((*axis).clone(), rest % values.len()));
        rest /= values.len();
    }
    picks.reverse();
    let mut v = base.clone();
    let mut shown = Vec::with_capacity(picks.len());
    for (axis, i) in &picks {
        let value = &matrix[axis][*i];
        set_path(&mut v, &path_of(axis), value.clone());
        shown.push((axis.clone(), show(value)));
        // Checked alone so the message names the one value at fault.
        let mut alone = base.clone();
        set_path(&mut alone, &path_of(axis), value.clone());
        if let Err(e) = read_fields(&alone) {
            bad.entry((axis.clone(), *i)).or_insert(e);
        }
    }
    let defaults = read_fields(&v).ok()?;
    let label = shown
        .iter()
        .map(|(a, v)| format!("{a}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let slug = slug(
        &shown
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join("-"),
    );
    Some(Variant {
        label,
        axes: shown,
        picks,
        slug,
        defaults,
    })
}

/// Slugs name files: make them unique.
fn unique_slugs(out: &mut [Variant]) {
    let mut taken = std::collections::HashSet::new();
    for (i, v) in out.iter_mut().enumerate() {
        let base = v.slug.clone();
        let mut n = i + 1;
        while v.slug.is_empty() || taken.contains(&v.slug) {
            v.slug = format!("{base}-v{n}").trim_start_matches('-').to_string();
            n += 1;
        }
        taken.insert(v.slug.clone());
    }
}

/// Task fields from `defaults` with a variant's values set, read as the job file is: as
/// YAML text, so that a number or boolean in a text field is the text written
/// (`system: [1, 2]` is as good as `system: 1` in `defaults`), as the JSON Schema says.
/// The error without the text's line and column, which are not the job file's, nor the
/// field's path, which the axis names.
fn read_fields(v: &Value) -> Result<TaskFields, String> {
    let text = serde_yaml::to_string(v).map_err(|e| e.to_string())?;
    serde_yaml::from_str(&text).map_err(|e| {
        let mut message = e.to_string();
        if let Some(l) = e.location() {
            let at = format!(" at line {} column {}", l.line(), l.column());
            message = message.replacen(&at, "", 1);
        }
        match super::locate::split_path_prefix(&message) {
            Some((_, rest)) => rest.to_string(),
            None => message,
        }
    })
}

/// The longest key of a task run. Keys name files (`transcripts/<key>.jsonl.tryN`,
/// `workspaces/<key>`), and a file name has at most 255 bytes on Linux filesystems.
pub(super) const MAX_KEY: usize = 200;

/// The run's unique name for one task in one variant and epoch. A name over [`MAX_KEY`]
/// keeps its start and ends in a digest of the whole name, so it stays unique and is the
/// same on every run (resume finds its files again).
pub(super) fn instance_key(task: &str, variant: &Variant, epoch: u32, epochs: u32) -> String {
    let mut key = task.to_string();
    if !variant.slug.is_empty() {
        key.push_str("--");
        key.push_str(&variant.slug);
    }
    if epochs > 1 {
        key.push_str(&format!("--e{epoch}"));
    }
    if key.len() <= MAX_KEY {
        return key;
    }
    let digest = format!("-{:016x}", fnv1a(key.as_bytes()));
    let mut cut = MAX_KEY - digest.len();
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    key.truncate(cut);
    key.push_str(&digest);
    key
}

pub(crate) use crate::text::fnv1a;

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(yaml: &str) -> BTreeMap<String, Vec<Value>> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn every_combination_once_in_a_fixed_order() {
        let m =
            matrix("toolset: [coding, readonly]\nmodel: [claude-sonnet-4-5, claude-haiku-4-5]\n");
        let d: Value = serde_yaml::from_str("model: x\nlimits: { max_turns: 3 }").unwrap();
        let v = variants(&m, &d, &TaskFields::default()).unwrap();
        let labels: Vec<&str> = v.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "model=claude-sonnet-4-5,toolset=coding",
                "model=claude-sonnet-4-5,toolset=readonly",
                "model=claude-haiku-4-5,toolset=coding",
                "model=claude-haiku-4-5,toolset=readonly",
            ]
        );
        assert_eq!(v[2].defaults.model.as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(v[3].defaults.toolset.as_deref(), Some("readonly"));
        assert_eq!(v[3].slug, "claude-haiku-4-5-readonly");
        assert_eq!(
            instance_key("t1", &v[3], 2, 3),
            "t1--claude-haiku-4-5-readonly--e2"
        );
        assert_eq!(instance_key("t1", &Variant::default(), 1, 1), "t1");
        let long = Variant {
            slug: "v".repeat(300),
            ..Variant::default()
        };
        let id = "i".repeat(200);
        let a = instance_key(&id, &long, 1, 10);
        let b = instance_key(&id, &long, 2, 10);
        assert_eq!(a.len(), MAX_KEY);
        assert_ne!(a, b, "the digest keeps long keys apart");
        assert_eq!(a, instance_key(&id, &long, 1, 10), "and stable");
        assert_eq!(
            fnv1a(b"agentbatch"),
            0x1e61_73df_10d2_7192,
            "FNV-1a, the same in every build"
        );
    }

    #[test]
    fn dotted_axes_set_one_field_and_keep_the_others() {
        let m = matrix("limits.max_turns: [2, 8]\n");
        let d: Value = serde_yaml::from_str("limits: { time_limit: 5m }").unwrap();
        let v = variants(&m, &d, &TaskFields::default()).unwrap();
        let l = v[1].defaults.limits.as_ref().unwrap();
        assert_eq!(l.max_turns, Some(8));
        assert!(l.time_limit.is_some());
        assert_eq!(v[1].label, "limits.max_turns=8");
        let t: Value = serde_yaml::from_str("id: a\nlimits: { max_turns: 1 }").unwrap();
        assert_eq!(
            task_conflict(&t, "limits.max_turns").as_deref(),
            Some("limits.max_turns")
        );
        assert_eq!(task_conflict(&t, "limits.time_limit"), None);
        assert_eq!(task_conflict(&t, "model"), None);
    }

    #[test]
    fn a_task_field_that_would_decide_an_axis_is_found() {
        let t: Value = serde_yaml::from_str(
            "id: a\ntools: [get_time]\nreasoning: { summary: auto }\nenv: { A: b }\n",
        )
        .unwrap();
        // tools and toolset go together.
        assert_eq!(task_conflict(&t, "toolset").as_deref(), Some("tools"));
        // reasoning replaces the default whole, so it decides reasoning.effort.
        assert_eq!(
            task_conflict(&t, "reasoning.effort").as_deref(),
            Some("reasoning")
        );
        // env is merged key by key: another key is no conflict, the same one is.
        assert_eq!(task_conflict(&t, "env.B"), None);
        assert_eq!(task_conflict(&t, "env.A").as_deref(), Some("env.A"));
    }

    #[test]
    fn slugs_stay_unique_however_the_values_are_spelled() {
        let m = matrix("system: [\"v2\", \"!\", \"?\"]\n");
        let v = variants(&m, &Value::Null, &TaskFields::default()).unwrap();
        let slugs: Vec<&str> = v.iter().map(|v| v.slug.as_str()).collect();
        let unique: std::collections::BTreeSet<&&str> = slugs.iter().collect();
        assert_eq!(unique.len(), 3, "{slugs:?}");
    }

    #[test]
    fn bad_axes_and_values_are_named() {
        let d = Value::Null;
        let e = variants(&matrix("modle: [a]\n"), &d, &TaskFields::default()).unwrap_err();
        assert_eq!(e[0].axis, "modle");
        assert!(e[0].message.contains("unknown field"), "{e:?}");
        let e = variants(
            &matrix("max_tokens: [100, lots]\n"),
            &d,
            &TaskFields::default(),
        )
        .unwrap_err();
        assert_eq!((e[0].axis.as_str(), e[0].index), ("max_tokens", Some(1)));
        let e = variants(
            &matrix("id: [a]\nmodel: []\ntoolset: [a, a]\n"),
            &d,
            &TaskFields::default(),
        )
        .unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
    }
}
