//! `agentbatch schema [job|script] [--markdown]`: the JSON Schema of job files or
//! simulator scripts, generated from the Rust types that parse them, for editors that
//! complete and check fields as one types; or the same as the user guide's field tables.
//! The repository keeps the output in schemas/ and docs/guide/, and a test fails when
//! it differs from what this prints.

use serde_json::Value;

use super::field_tables::FieldTables;
use crate::job::parse_yaml;
use crate::job::schema::{JobFile, SimSource};
use crate::sim::script::Script;
use crate::vocab::json_schema;

/// Which kind of file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A job file (jobs/*.yaml).
    Job,
    /// A simulator script (jobs/sim/*.yaml), also written inline as a task's `sim:`.
    Script,
}

/// The command's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SchemaArgs {
    /// Which kind of file the schema describes.
    #[arg(value_enum, default_value = "job")]
    pub kind: Kind,
    /// Print the fields as Markdown tables (the user guide's field reference) instead
    /// of the JSON Schema.
    #[arg(long)]
    pub markdown: bool,
}

/// The JSON Schema (2020-12) of a kind of file.
pub fn schema(kind: Kind) -> Value {
    let generator = json_schema::settings().into_generator();
    let root = match kind {
        Kind::Job => generator.into_root_schema_for::<JobFile>(),
        Kind::Script => generator.into_root_schema_for::<Script>(),
    };
    let mut value = root.to_value();
    if let Value::Object(fields) = &mut value {
        // A file must hold a mapping; only the values inside may be left empty.
        fields.insert("type".into(), Value::from("object"));
        // What a reader looks for first goes first; the rest keeps schemars' order.
        let mut ordered = serde_json::Map::new();
        for key in ["$schema", "title", "description"] {
            if let Some(v) = fields.shift_remove(key) {
                ordered.insert(key.into(), v);
            }
        }
        ordered.append(fields);
        *fields = ordered;
    }
    value
}

/// Whether the parser reads `text` as this kind of file: serde's reading (a key written
/// twice refused, as the loader does) and every script's own checks, without the files,
/// environment and cross-field checks a full load adds. It is what the schema mirrors:
/// the schema accepts every text this accepts, and the integration tests hold it to
/// that with texts whose full load would fail for reasons no schema can see.
pub fn parses(kind: Kind, text: &str) -> Result<(), String> {
    let scripts: Vec<Script> = match kind {
        Kind::Script => vec![parse_yaml::<Script>("script", text).map_err(|e| e.to_string())?],
        Kind::Job => {
            let job: JobFile = parse_yaml("job", text).map_err(|e| e.to_string())?;
            std::iter::once(&job.defaults)
                .chain(&job.tasks)
                .filter_map(|t| match &t.sim {
                    Some(SimSource::Inline(s)) => Some(s.clone()),
                    _ => None,
                })
                .collect()
        }
    };
    scripts
        .iter()
        .try_for_each(|s| s.check().map_err(|e| e.to_string()))
}

/// What the command prints: the schema as pretty JSON, or the field tables.
pub fn text(args: &SchemaArgs) -> String {
    let schema = schema(args.kind);
    if !args.markdown {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(&schema).unwrap_or_default()
        );
    }
    let tables = match args.kind {
        Kind::Job => FieldTables {
            title: "Job file fields",
            note: "Generated from the job-file schema by `agentbatch schema job --markdown`; do not edit by hand. Simulator scripts have [their own fields](script-fields.md); see [Editor completion](editor-completion.md) for the schemas themselves.",
            elsewhere: &[("Script", "script-fields.md")],
        },
        Kind::Script => FieldTables {
            title: "Simulator script fields",
            note: "Generated from the script schema by `agentbatch schema script --markdown`; do not edit by hand. A script is a file of its own or a task's `sim:` in a [job file](job-file-fields.md).",
            elsewhere: &[],
        },
    };
    tables.render(&schema)
}

/// Prints the schema or its tables; the exit code.
pub fn print(args: &SchemaArgs) -> u8 {
    print!("{}", text(args));
    0
}
