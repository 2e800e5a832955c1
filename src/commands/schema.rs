//! `agentbatch schema [job|script] [--markdown]`: the JSON Schema of job files or
//! simulator scripts, generated from the Rust types that parse them, for editors that
//! complete and check fields as one types; or the same as the user guide's field tables.
//! The repository keeps the output in schemas/ and docs/guide/, and a test fails when
//! it differs from what this prints.

use serde_json::Value;

use super::field_tables::FieldTables;
use crate::job::schema::JobFile;
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
