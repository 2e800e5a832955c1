//! Reports: the single writer of a run's output folder. Tasks send [`Event`]s; the
//! [`Reporter`] appends transcripts, writes one results.csv row per finished task
//! (flushed at once, so a killed run keeps every finished task), keeps the progress
//! display, and writes run.json at the start and the end.

mod attempts;
mod progress;
mod results;
mod spend;
mod summary;
mod variants;
mod writer;

pub use attempts::{whole_run_cost, EarlierAttempts, Spend};
pub use results::{axis_column, ResultsCsv, COLUMNS};
pub use spend::spent_in_transcript;
pub use summary::{RunTotals, Summary};
pub use variants::{summarize, summary_columns, variants_table, write_summary_csv, VariantSummary};
pub use writer::{write_run_json, ProgressMode, ReportError, Reporter, ReporterConfig};
