//! The `agentbatch` command line: parses arguments and calls the library.
//! Exit codes: 0 the run finished and its reports are written (task failures are data),
//! 1 the run itself broke (a file of the run folder could not be read or written, the
//! ledger or the simulator failed, a task hit a bug): the run folder may hold part of
//! the run, and `--resume` continues it; 2 the job file, the arguments or the run folder
//! given are invalid, found before anything was written (nothing ran, nothing changed);
//! 130 the run was interrupted (its reports are written, unfinished tasks as cancelled).
//! `RunError::exit_code` decides between 1 and 2. The commands, their arguments and
//! their handlers are in `agentbatch::commands`.

use std::process::ExitCode;

use clap::Parser;

use agentbatch::commands::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The period clock (`AGENTBATCH_PERIOD_CLOCK`) starts now, not at its first use.
    let _ = agentbatch::govern::clock::period_now();
    // Before any thread starts: overlay workspaces are mounted only in a mount namespace
    // of the process's own, so they vanish with it, even after kill -9. Only the
    // commands that make (or describe) workspaces take one.
    if cli.command.makes_workspaces() {
        agentbatch::tools::layer::private_mounts();
    }
    // A command that only prints ends quietly when its reader goes (`validate | head`).
    if cli.command.only_prints() {
        agentbatch::resources::end_quietly_when_stdout_closes();
    }
    // Thousands of loops in flight hold thousands of connections and transcripts.
    agentbatch::resources::raise_open_files_limit();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentbatch: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(cli.command.run())
}
