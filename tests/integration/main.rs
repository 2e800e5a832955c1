//! Integration tests: real HTTP between the runner and the built-in simulator, real
//! report files, and the built binary for the command line.

mod audit;
mod batch_client;
mod batch_runs;
mod caching;
mod chaos;
mod cli;
mod common;
mod compare;
mod conformance;
mod context;
mod docs;
mod faults;
mod govern;
mod hostile;
mod layers;
mod limits;
mod load;
mod matrix;
mod mcp;
mod openai;
mod otlp;
mod postgres;
mod prompt_cache;
mod protocol;
mod repeats;
mod repo;
mod report_page;
mod reports;
mod schema;
mod shared_run;
mod sim_batch;
mod stream_runs;
mod streaming;
mod summarize;
mod workspaces;
