//! The suites' own verifiers, in place of a check: SWE-bench's grading in a fresh
//! container of the instance's image, and Harbor's tests copied in after the agent
//! with the reward read back. A verifier that cannot run (the engine, the image, the
//! container) gives no verdict: the task's outcome is `error`, which a resume runs
//! again, never `fail`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::fresh::{Fresh, Ground};
use super::repo::{CheckResult, Prepared};
use crate::job::schema_suite::SwebenchEvalType;
use crate::job::{HarborVerifier, SwebenchVerifier, TaskSpec, Verifier};
use crate::suite::swebench;
use crate::tools::container::{Container, EnvironmentConfig};
use crate::tools::RunLimits;
use crate::vocab::log::TaskLog;
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::{TranscriptEvent, VerifierRecord};

/// The test output kept in the transcript (its end).
const OUTPUT_TAIL: usize = 16_000;
/// The most of a test log read back for grading: a parser reads the whole of what the
/// markers enclose, so this is generous.
const LOG_LIMIT: usize = 64 << 20;
/// Copying files in and reading rewards back.
const SMALL: Duration = Duration::from_secs(120);

/// Runs the task's verifier after its loop, unless the task never ran or the run is
/// being cancelled (then there is no verdict). `regrade` is 0 for the run's own
/// verification.
#[allow(clippy::too_many_arguments)]
pub async fn verify(
    spec: &TaskSpec,
    env: &Ground<'_>,
    verifier: &Verifier,
    prepared: &Prepared,
    patch: Option<&[u8]>,
    stop: &Stop,
    log: &TaskLog,
    regrade: u32,
) -> Option<CheckResult> {
    let config = spec.environment.as_ref()?;
    if prepared.failed.is_some()
        || stop.reason == StopReason::Cancelled
        || env.cancel.is_cancelled()
    {
        return None;
    }
    let started = Instant::now();
    let mut record = match verifier {
        Verifier::Swebench(v) => swebench_verify(spec, env, config, v, prepared, patch, log).await,
        Verifier::Harbor(v) => harbor_verify(spec, env, config, v, prepared, patch, log).await,
    };
    if env.cancel.is_cancelled() && record.error.is_some() {
        return None;
    }
    record.ms = started.elapsed().as_millis() as u64;
    record.regrade = regrade;
    let result = CheckResult {
        passed: record.passed,
        exit_code: record.exit_code,
        ms: record.ms,
        tests_passed: record.tests_passed,
        tests_failed: record.tests_failed,
        reward: record.reward,
        infra: record.error.clone(),
    };
    log.emit(TranscriptEvent::Verifier(Box::new(record)));
    Some(result)
}

fn infra(kind: &str, error: String) -> VerifierRecord {
    VerifierRecord {
        kind: kind.into(),
        error: Some(error),
        ..Default::default()
    }
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(OUTPUT_TAIL);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

/// SWE-bench's `run_instance`: a fresh container of the instance's image, the agent's
/// patch applied with the harness's chain of commands, the evaluation script run, its
/// log graded as `get_eval_report` grades it.
async fn swebench_verify(
    spec: &TaskSpec,
    env: &Ground<'_>,
    config: &EnvironmentConfig,
    v: &SwebenchVerifier,
    prepared: &Prepared,
    patch: Option<&[u8]>,
    log: &TaskLog,
) -> VerifierRecord {
    const KIND: &str = "swebench";
    let fail = |invalid: String| VerifierRecord {
        kind: KIND.into(),
        invalid: Some(invalid),
        tests_passed: Some(0),
        tests_failed: Some((v.fail_to_pass.len() + v.pass_to_pass.len()) as u32),
        ..Default::default()
    };
    // The harness's every apply command fails on an empty patch: not resolved, and no
    // container is needed to say so.
    let patch = match patch {
        Some(p) if !p.is_empty() => p,
        _ => return fail("the patch is empty (the agent changed nothing)".into()),
    };
    // The patch is applied inside the container, as the harness applies it, not here.
    let fresh = match Fresh::make(spec, env, config, prepared, None, "verifier", false, log).await {
        Ok(f) => f,
        Err(e) => return infra(KIND, e),
    };
    let record = async {
        let c = &fresh.container;
        let file = c.put("agent.patch", patch).map_err(|e| e.to_string())?;
        if let Err(last) = apply_in(c, &file, env.cancel).await? {
            return Ok(fail(format!("{}: {last}", swebench::APPLY_PATCH_FAIL)));
        }
        let script = c
            .put(
                "eval.sh",
                swebench::eval_script_with_exit_code(&v.eval_script).as_bytes(),
            )
            .map_err(|e| e.to_string())?;
        // The log is the command's own output, which the runner reads as it comes:
        // nothing the tests leave in the container (a FIFO where a log file was
        // expected, a log rewritten afterwards) can stall or forge it.
        let out = c
            .run(
                &format!("/bin/bash {script}"),
                RunLimits {
                    timeout: v.timeout,
                    max_output: LOG_LIMIT,
                },
                env.cancel,
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        if out.cancelled {
            return Err("cancelled".to_string());
        }
        let text = out.output.into_bytes();
        if out.timed_out {
            return Ok(VerifierRecord {
                timed_out: true,
                output: tail(&text),
                ..fail(format!(
                    "tests timed out after {}",
                    humantime::format_duration(v.timeout)
                ))
            });
        }
        Ok(graded(v, &text))
    }
    .await;
    fresh.remove().await;
    record.unwrap_or_else(|e| infra(KIND, e))
}

/// The harness's chain of apply commands on the patch at `file` inside the container,
/// the tree reset between tries: Ok(Err(last output)) when none applied it.
async fn apply_in(
    c: &Container,
    file: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Result<(), String>, String> {
    let limits = RunLimits {
        timeout: SMALL,
        max_output: 8_000,
    };
    let mut last = String::new();
    for (n, command) in swebench::GIT_APPLY_CMDS.iter().enumerate() {
        if n > 0 {
            c.run("git checkout -- . ; git clean -fd", limits, cancel, &[])
                .await
                .map_err(|e| e.to_string())?;
        }
        let out = c
            .run(&format!("{command} {file}"), limits, cancel, &[])
            .await
            .map_err(|e| e.to_string())?;
        if out.success() {
            return Ok(Ok(()));
        }
        last = out.output;
    }
    // The chain can leave the patch applied while each command failed.
    let out = c
        .run(
            &format!("git apply --check --reverse {file}"),
            limits,
            cancel,
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    if out.success() {
        return Ok(Ok(()));
    }
    Ok(Err(last.trim().lines().last().unwrap_or("").to_string()))
}

/// The evaluation log graded as the harness grades it.
fn graded(v: &SwebenchVerifier, text: &[u8]) -> VerifierRecord {
    let graded = swebench::grade(
        &String::from_utf8_lossy(text),
        &v.log_parser,
        &v.fail_to_pass,
        &v.pass_to_pass,
        match v.eval_type {
            SwebenchEvalType::PassAndFail => swebench::EvalType::PassAndFail,
            SwebenchEvalType::FailOnly => swebench::EvalType::FailOnly,
        },
    );
    let listed = (v.fail_to_pass.len() + v.pass_to_pass.len()) as u32;
    let passed_n = (graded.f2p_success.len() + graded.p2p_success.len()) as u32;
    VerifierRecord {
        kind: "swebench".into(),
        passed: graded.resolved,
        invalid: graded.invalid_reason.clone(),
        tests_passed: Some(if graded.valid { passed_n } else { 0 }),
        tests_failed: Some(if graded.valid {
            listed - passed_n.min(listed)
        } else {
            listed
        }),
        tests: graded
            .statuses
            .iter()
            .map(|(k, s)| (k.clone(), s.as_str().to_string()))
            .collect(),
        fail_to_pass_failed: graded.f2p_failure.clone(),
        pass_to_pass_failed: graded.p2p_failure.clone(),
        exit_code: graded.exit_code,
        output: tail(text),
        ..Default::default()
    }
}

/// Harbor's verifier: `tests/` copied to `/tests` (whatever the agent left there),
/// stale rewards removed, the test script run with its timeout and variables, the
/// reward read from `/logs/verifier/reward.json` or `reward.txt`.
async fn harbor_verify(
    spec: &TaskSpec,
    env: &Ground<'_>,
    config: &EnvironmentConfig,
    v: &HarborVerifier,
    prepared: &Prepared,
    patch: Option<&[u8]>,
    log: &TaskLog,
) -> VerifierRecord {
    const KIND: &str = "harbor";
    // A regrade has no agent's container left: it grades as `separate` does.
    let fresh = if v.separate || prepared.container.is_none() {
        let network = config.network == crate::tools::container::Network::Bridge;
        match Fresh::make(spec, env, config, prepared, patch, "verifier", network, log).await {
            Ok(f) => Some(f),
            Err(e) => return infra(KIND, e),
        }
    } else {
        None
    };
    let container = match (&fresh, &prepared.container) {
        (Some(f), _) => f.container.clone(),
        (None, Some(c)) => c.clone(),
        (None, None) => return infra(KIND, "the task's container is gone".into()),
    };
    let record = run_harbor(&container, v, env.cancel).await;
    if let Some(f) = fresh {
        f.remove().await;
    }
    record.unwrap_or_else(|e| infra(KIND, e))
}

async fn run_harbor(
    c: &Container,
    v: &HarborVerifier,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<VerifierRecord, String> {
    let small = RunLimits {
        timeout: SMALL,
        max_output: 8_000,
    };
    // As root, as Harbor does it: whatever the agent left at /tests (its own tests, a
    // file it made read-only) and any stale reward go, and the tests may write their
    // logs whatever USER they run as.
    as_root(
        c,
        "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier && chmod 0777 /logs/verifier",
        cancel,
    )
    .await
    .map_err(|e| format!("cannot make /tests and /logs/verifier in the container: {e}"))?;
    if let Some(tests) = &v.tests {
        c.copy_in(tests, "/tests")
            .await
            .map_err(|e| format!("cannot copy the tests in: {e}"))?;
    }
    let inside = match v.tests.as_ref().and_then(|t| v.script.strip_prefix(t).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => format!("/tests/{}", rel.display()),
        _ => {
            let name = v
                .script
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| "test.sh".into());
            let inside = format!("/tests/{name}");
            c.copy_in(&v.script, &inside)
                .await
                .map_err(|e| format!("cannot copy the test script in: {e}"))?;
            inside
        }
    };
    let script = shell_quote(&inside);
    // Harbor runs the script itself (its shebang decides), made executable as root.
    let _ = as_root(c, &format!("chmod +x {script}"), cancel).await;
    let env: Vec<(&str, &str)> = v
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let out = c
        .run(
            &format!("({script}) > /logs/verifier/test-stdout.txt 2>&1"),
            RunLimits {
                timeout: v.timeout,
                max_output: 4_000,
            },
            cancel,
            &env,
        )
        .await
        .map_err(|e| e.to_string())?;
    if out.cancelled {
        return Err("cancelled".into());
    }
    let read = |file: &'static str| read_back(c, file, small, cancel);
    let output = read("test-stdout.txt")
        .await?
        .map(|b| tail(&b))
        .unwrap_or_default();
    let mut record = VerifierRecord {
        kind: "harbor".into(),
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        output,
        ..Default::default()
    };
    let rewards = match read("reward.json").await? {
        Some(json) => Some(parse_reward_json(&json)),
        None => read("reward.txt")
            .await?
            .map(|t| parse_reward_text(&t).map(|r| BTreeMap::from([("reward".to_string(), r)]))),
    };
    let rewards = match rewards {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            record.invalid = Some(e);
            None
        }
        None if v.reward_from_exit_code && !out.timed_out => Some(BTreeMap::from([(
            "reward".to_string(),
            if out.exit_code == Some(0) { 1.0 } else { 0.0 },
        )])),
        None if out.timed_out => {
            record.invalid = Some(format!(
                "the tests timed out after {}",
                humantime::format_duration(v.timeout)
            ));
            None
        }
        None => {
            record.invalid = Some(
                "no reward file: the tests wrote neither /logs/verifier/reward.txt nor reward.json"
                    .into(),
            );
            None
        }
    };
    if let Some(r) = rewards {
        let reward = deciding_reward(&r);
        record.passed = reward >= v.threshold;
        record.reward = Some(reward);
        record.rewards = Some(r);
    }
    Ok(record)
}

/// Runs `script` through the command loop, and again as root through the engine when
/// that fails (an image whose USER is not root): an engine `exec` costs a tenth of a
/// second or more, the loop a few milliseconds.
async fn as_root(
    c: &Container,
    script: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let limits = RunLimits {
        timeout: SMALL,
        max_output: 4_000,
    };
    let out = c
        .run(script, limits, cancel, &[])
        .await
        .map_err(|e| e.to_string())?;
    if out.success() {
        return Ok(());
    }
    c.exec_as_root(script, SMALL)
        .await
        .map_err(|e| e.to_string())
}

/// A file of `/logs/verifier`, read as the output of `cat` (a larger file is cut to its
/// first and last half MiB, which no reward parses); None when the tests did not
/// write it as a regular file (a FIFO there would stall a reader).
async fn read_back(
    c: &Container,
    file: &'static str,
    small: RunLimits,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Option<Vec<u8>>, String> {
    const MAX: usize = 1 << 20;
    let got = c
        .run(
            &format!("f=/logs/verifier/{file}; [ -f \"$f\" ] || exit 3; cat -- \"$f\""),
            RunLimits {
                max_output: MAX,
                ..small
            },
            cancel,
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    if got.cancelled {
        return Err("cancelled".into());
    }
    if !got.success() {
        return Ok(None);
    }
    Ok(Some(got.output.into_bytes()))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The reward that decides: `reward` when reward.json has it, the only one, else the
/// mean of them all.
pub fn deciding_reward(r: &BTreeMap<String, f64>) -> f64 {
    if let Some(v) = r.get("reward") {
        return *v;
    }
    if r.is_empty() {
        return 0.0;
    }
    r.values().sum::<f64>() / r.len() as f64
}

/// reward.txt: one finite number.
pub fn parse_reward_text(bytes: &[u8]) -> Result<f64, String> {
    let text = String::from_utf8_lossy(bytes);
    let t = text.trim();
    if t.is_empty() {
        return Err("the reward file /logs/verifier/reward.txt is empty".into());
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!(
            "/logs/verifier/reward.txt holds \"{}\", not a number",
            t.chars().take(80).collect::<String>()
        )),
    }
}

/// reward.json: an object of finite numbers or booleans (or one of them).
pub fn parse_reward_json(bytes: &[u8]) -> Result<BTreeMap<String, f64>, String> {
    let bad = |why: &str| Err(format!("/logs/verifier/reward.json {why}"));
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return bad(&format!("is not JSON: {e}")),
    };
    let mut out = BTreeMap::new();
    match value {
        serde_json::Value::Number(n) => {
            out.insert("reward".to_string(), n.as_f64().unwrap_or(f64::NAN));
        }
        serde_json::Value::Bool(b) => {
            out.insert("reward".to_string(), f64::from(u8::from(b)));
        }
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                // Python's bool is an int, so Harbor takes `true` as 1.
                match v
                    .as_f64()
                    .or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))
                {
                    Some(f) => {
                        out.insert(k, f);
                    }
                    None => return bad(&format!("has a reward \"{k}\" that is not a number")),
                }
            }
        }
        _ => return bad("is neither a number nor an object of numbers"),
    }
    if out.is_empty() {
        return bad("names no reward");
    }
    if out.values().any(|v| !v.is_finite()) {
        return bad("has a reward that is not finite");
    }
    Ok(out)
}

/// Runs `spec`'s verifier again on its recorded `patch`, in fresh environments and
/// without any model request (`agentbatch regrade`): the Nth regrade of the task.
/// None when the task has no verifier.
pub async fn regrade(
    spec: &TaskSpec,
    ground: &Ground<'_>,
    patch: Option<&[u8]>,
    log: &TaskLog,
    n: u32,
) -> Option<CheckResult> {
    let verifier = spec.verifier.as_deref()?;
    let config = spec.environment.as_ref()?;
    let repo = spec.repo.as_ref()?;
    let kind = match verifier {
        Verifier::Swebench(_) => "swebench",
        Verifier::Harbor(_) => "harbor",
    };
    let got = match ground.containers.get(config, repo).await {
        Ok(g) => g,
        Err(e) => {
            let record = VerifierRecord {
                regrade: n,
                ..infra(kind, e)
            };
            let result = CheckResult {
                infra: record.error.clone(),
                ..Default::default()
            };
            log.emit(TranscriptEvent::Verifier(Box::new(record)));
            return Some(result);
        }
    };
    let prepared = Prepared {
        env: Some(got),
        ..Default::default()
    };
    let stop = Stop::new(StopReason::Completed, "regrade");
    verify(spec, ground, verifier, &prepared, patch, &stop, log, n).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_read_as_harbor_reads_them() {
        assert_eq!(parse_reward_text(b" 1\n"), Ok(1.0));
        assert!(parse_reward_text(b"").is_err());
        assert!(parse_reward_text(b"nan").is_err());
        assert!(parse_reward_text(b"inf").is_err());
        assert!(parse_reward_text(b"yes").is_err());
        let j = parse_reward_json(br#"{"reward": 0.5, "style": 1}"#).unwrap();
        assert_eq!(deciding_reward(&j), 0.5);
        let j = parse_reward_json(br#"{"a": 0.5, "b": 1}"#).unwrap();
        assert_eq!(deciding_reward(&j), 0.75);
        assert!(parse_reward_json(br#"{"a": "1"}"#).is_err());
        assert!(parse_reward_json(br#"{}"#).is_err());
        assert!(parse_reward_json(br#"[1]"#).is_err());
        assert_eq!(deciding_reward(&parse_reward_json(b"0.25").unwrap()), 0.25);
        let j = parse_reward_json(br#"{"reward": true, "style": false}"#).unwrap();
        assert_eq!((j["reward"], j["style"]), (1.0, 0.0));
    }
}
