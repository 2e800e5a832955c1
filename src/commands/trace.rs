//! The flags that turn a run's traces on, shared by `run` (and its resume) and `worker`.

use crate::trace::Settings;

/// OpenTelemetry traces of the tasks (off by default).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// Export each task's trace to this OTLP/HTTP collector (its base URL, as in
    /// OTEL_EXPORTER_OTLP_ENDPOINT; /v1/traces is added to its path, a query kept; no
    /// user:password in it, give OTEL_EXPORTER_OTLP_HEADERS=Authorization=... instead).
    /// Without it, the OTEL_EXPORTER_OTLP_* variables turn traces on.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Put message contents, tool arguments and tool results on the spans (they may be
    /// large or sensitive; keys and headers never are).
    #[arg(long)]
    pub otlp_content: bool,
}

impl TraceArgs {
    /// Where traces go, from the flags and the process's environment; None: off. What
    /// was ignored is warned about on stderr now; a setting that would lose every span
    /// or leak a credential is said on stderr and is an Err, for exit code 2 before
    /// anything runs.
    pub fn settings(&self) -> Result<Option<Settings>, u8> {
        let settings = Settings::resolve(self.otlp.as_deref(), self.otlp_content, |name| {
            std::env::var(name).ok()
        })
        .map_err(|e| {
            eprintln!("agentbatch: {e}");
            2
        })?;
        match &settings {
            None if self.otlp.is_some() => {
                eprintln!("agentbatch: OTEL_SDK_DISABLED=true: no traces are sent despite --otlp")
            }
            None => {}
            Some(s) => {
                for w in &s.warnings {
                    eprintln!("agentbatch: traces: {w}");
                }
            }
        }
        Ok(settings)
    }
}
