//! Reports: the single writer of a run's output folder. Tasks send [`Event`]s; the
//! [`Reporter`] appends transcripts, writes one results.csv row per finished task
//! (flushed at once, so a killed run keeps every finished task), keeps the progress
//! display, and writes run.json at the start and the end.

mod attempts;
mod progress;
mod results;
mod resume;
mod run_json;
mod spend;
mod summary;
mod variants;
mod writer;

pub use attempts::{whole_run_cost, AttemptsError, EarlierAttempts, Spend};
pub use results::{axis_column, ResultsCsv, ResultsError, COLUMNS};
pub(crate) use results::{header_for, parse_results, read_results, ResultRow};
pub(crate) use resume::ResumeChanges;
pub use run_json::{ResumeRecord, RunJson, RunJsonError};
pub use spend::spent_in_transcript;
pub use summary::{RunTotals, Summary};
pub use variants::{
    summarize, summary_columns, variants_table, write_summary_csv, VariantSummary, VariantsError,
};
pub(crate) use writer::remove_empty_work_folders;
pub use writer::{ProgressMode, ReportError, Reporter, ReporterConfig};
