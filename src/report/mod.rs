//! Reports: the single writer of a run's output folder. Tasks send [`Event`]s; the
//! [`Reporter`] appends transcripts, writes one results.csv row per finished task
//! (flushed at once, so a killed run keeps every finished task), keeps the progress
//! display, and writes run.json at the start and the end. The module also owns the
//! other writes into the folder: a resume's rewrites ([`ResumeChanges`]) and
//! summary.csv ([`write_summary_csv`]). Each file format has one module, shared by its
//! writer and its readers: results.csv (and superseded.csv) in `results`, run.json in
//! `run_json`, a task's patch in `patches`.

mod attempts;
mod error;
pub mod files;
mod folder;
mod patches;
mod progress;
pub mod regrade;
mod results;
mod resume;
mod run_json;
mod spend;
mod summary;
mod variants;
mod writer;
mod writer_threads;

pub use attempts::{whole_run_cost, AttemptsError};
pub use error::ReportError;
pub use folder::Ended;
pub(crate) use folder::{append_transcript_events, collectable, mark_worker, write_collected};
pub(crate) use patches::read_patch;
pub use patches::PatchError;
pub(crate) use results::{axes_in, header_for, parse_results, read_results, ResultRow};
pub use results::{ResultsError, COLUMNS};
pub(crate) use resume::ResumeChanges;
pub use run_json::LearnedLimits;
pub use run_json::RunJsonError;
pub(crate) use run_json::{PlannedTask, ResumeRecord, RunJson, WorkersKilled};
pub use spend::{paid_answers, spent_in_text, spent_in_transcript};
pub use summary::{RunTotals, Summary};
pub(crate) use variants::{read_variants, write_summary_csv};
pub use variants::{variants_table, VariantSummary, VariantsError};
pub(crate) use writer::remove_empty_work_folders;
pub use writer::ProgressMode;
pub(crate) use writer::{Finished, Reporter, ReporterConfig};
