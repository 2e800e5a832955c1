//! `agentbatch export FORMAT RUN_DIR`: a run folder in another tool's format, written
//! beside the run (`exports/`) or where `--out` says, with what was left out on stderr.

use std::path::PathBuf;

use clap::Subcommand;

use crate::export::{atif, predictions, AtifOptions, ExportError, Exported, PredictionsOptions};
use crate::text::clip_quotes;

/// The formats `agentbatch export` writes; each variant's doc comment is its `--help`.
#[derive(Subcommand)]
pub enum ExportFormat {
    /// SWE-bench predictions for the official evaluation harness: one JSONL line per task
    /// run with a patch ({"instance_id", "model_name_or_path", "model_patch"}), one epoch,
    /// one file per matrix variant (<stem>.<variant>.jsonl). Default file:
    /// RUN_DIR/exports/predictions.jsonl.
    SwebenchPredictions {
        /// The run folder (or its results.csv).
        #[arg(value_name = "RUN_DIR")]
        run: PathBuf,
        /// The predictions file (*.jsonl); with several variants, each goes beside it as
        /// <stem>.<variant>.jsonl.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// model_name_or_path of every line (default: the task's model, plus the variant
        /// label with a matrix).
        #[arg(long, value_name = "NAME")]
        model_name: Option<String>,
        /// Only this variant: its label (axis=value,...) or its file-name form.
        #[arg(long, value_name = "VARIANT")]
        variant: Option<String>,
        /// The epoch whose attempts are written.
        #[arg(long, value_name = "N", default_value_t = 1)]
        epoch: u32,
    },
    /// ATIF trajectories (Harbor's Agent Trajectory Interchange Format): one JSON file
    /// per task run, <key>.json, from its transcript. Default folder:
    /// RUN_DIR/exports/atif.
    Atif {
        /// The run folder (or its results.csv).
        #[arg(value_name = "RUN_DIR")]
        run: PathBuf,
        /// The folder the files go to.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// Writes the export and says what it wrote; the exit code: 0 written, 2 the run folder
/// cannot be read or the arguments do not fit it (nothing written), 1 a file could not
/// be written.
pub fn export(format: ExportFormat) -> u8 {
    let done = match format {
        ExportFormat::SwebenchPredictions {
            run,
            out,
            model_name,
            variant,
            epoch,
        } => predictions(&PredictionsOptions {
            run,
            out,
            model_name,
            variant,
            epoch,
        }),
        ExportFormat::Atif { run, out } => atif(&AtifOptions { run, out }),
    };
    report(done)
}

fn report(done: Result<Exported, ExportError>) -> u8 {
    match done {
        Ok(done) => {
            for note in &done.notes {
                eprintln!("agentbatch export: {}", clip_quotes(note));
            }
            for line in &done.summary {
                println!("{line}");
            }
            0
        }
        Err(e) => {
            eprintln!("agentbatch export: {}", clip_quotes(&e.to_string()));
            e.exit_code()
        }
    }
}
