//! What one batch of the chaos property test runs: a task per seed (its protocol,
//! repository, team, cap and knobs drawn from the seed), the fixture repositories, and
//! the job file over them with task, team and run caps.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use rust_decimal::Decimal;

use crate::common::{calc_fixture, Case};

pub(super) const SENTINEL: &str = "sentinel.txt";
pub(super) const SENTINEL_TEXT: &str = "the outside world; nothing may change me\n";
pub(super) const PROVIDERS: [&str; 3] = ["sim", "sim-responses", "sim-chat"];
pub(super) const REPOS: [&str; 2] = ["gitrepo", "plain"];
pub(super) const TEAMS: [Option<&str>; 3] = [Some("red"), Some("blue"), None];
/// A task's own cap, by seed.
pub(super) const TASK_CAPS: [&str; 3] = ["0.05", "0.20", "1.00"];
/// Longest generated string, by seed.
pub(super) const MAX_STRINGS: [u64; 3] = [4096, 65_536, 1_048_576];
/// How often the model misbehaves and the server fails, and how long it talks, by seed.
pub(super) const MISBEHAVE: [u32; 3] = [5, 15, 30];
pub(super) const FAULTS: [u32; 2] = [5, 15];
pub(super) const TURNS: [u32; 3] = [4, 8, 16];

/// What a seed's task is made of: its protocol, repository, team, cap.
pub(super) struct Task {
    pub seed: u64,
    pub provider: &'static str,
    pub repo: &'static str,
    pub team: Option<&'static str>,
    pub cap: Decimal,
    max_string: u64,
    misbehave: u32,
    faults: u32,
    turns: u32,
    /// wrap_up and show_budget: the last affordable request goes with tools off.
    wrap_up: bool,
    /// `always` or `never`: streamed answers get the chaos model's mid-stream faults.
    stream: &'static str,
    /// Half of the unstreamed tasks go through the batch APIs: the chaos model's faults
    /// then come back as errored batch items.
    batch: bool,
    /// A context window the job states (0: the model's), small enough for long chaos
    /// answers to pass it: compaction under fire.
    pub window: u64,
    /// The window the simulator enforces: the job's, or twice it, so that what the
    /// runner sends is answered and only its own check keeps requests inside the job's.
    pub sim_window: u64,
    /// How a small window is kept: the default escalation, summaries only, or the
    /// provider's own context management (Chat Completions has none: summaries).
    pub strategy: &'static str,
    /// `auto` (an overlay layer under the binary) or `copy`.
    workspaces: &'static str,
}

/// An index in 0..k for one attribute of a seed's task, independent of the others
/// (a SplitMix64 step over the seed and the attribute's number).
fn choose(seed: u64, attribute: u64, k: usize) -> usize {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(attribute.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % k as u64) as usize
}

impl Task {
    pub fn new(seed: u64) -> Task {
        let mut t = Task::drawn(seed);
        t.batch = t.stream == "never" && choose(seed, 12, 2) == 0;
        t.sim_window = t.window * [1, 1, 2][choose(seed, 13, 3)];
        t
    }

    fn drawn(seed: u64) -> Task {
        Task {
            seed,
            // every protocol in turn, so any three consecutive seeds cover them all
            provider: PROVIDERS[(seed % 3) as usize],
            repo: REPOS[choose(seed, 1, 2)],
            team: TEAMS[choose(seed, 2, 3)],
            cap: Decimal::from_str(TASK_CAPS[choose(seed, 3, 3)]).expect("a price"),
            max_string: MAX_STRINGS[choose(seed, 4, 3)],
            misbehave: MISBEHAVE[choose(seed, 5, 3)],
            faults: FAULTS[choose(seed, 6, 2)],
            turns: TURNS[choose(seed, 7, 3)],
            wrap_up: choose(seed, 8, 2) == 0,
            stream: ["always", "never"][choose(seed, 9, 2)],
            batch: false,
            window: [0, 8_000, 4_000][choose(seed, 10, 3)],
            sim_window: 0,
            strategy: match (choose(seed, 11, 3), seed % 3) {
                (0, _) => "auto",
                (1, _) | (_, 2) => "summarize",
                _ => "native",
            },
            workspaces: ["auto", "copy"][choose(seed, 13, 2)],
        }
    }

    pub fn id(&self) -> String {
        format!("s{}", self.seed)
    }
}

/// Links in every fixture repository, which no task is asked to touch: one naming a
/// file of the repository by its absolute path, one to the outside folder's sentinel,
/// and one leaving the repository by `..`.
const FIXTURE_LINKS: [&str; 3] = ["abs_link", "outside_link", "up_link"];

/// The fixture repository: a failing test, a .gitignore, a subfolder, and links.
pub(super) fn write_repo(case: &Case, name: &str) -> PathBuf {
    case.write(&format!("{name}/sub/mod.py"), "X = 1\n");
    let repo = calc_fixture(case, name);
    let abs = repo.canonicalize().expect("the fixture's folder");
    for (target, link) in [
        (abs.join("sub/mod.py"), FIXTURE_LINKS[0]),
        (case.path(&format!("outside/{SENTINEL}")), FIXTURE_LINKS[1]),
        (Path::new("../outside").join(SENTINEL), FIXTURE_LINKS[2]),
    ] {
        std::os::unix::fs::symlink(target, repo.join(link)).expect("a link");
    }
    repo
}

/// Team and run caps for a batch: red binds, blue rarely (its per-run cap is also a
/// daily cap in the ledger file), the run near the end.
pub(super) struct Caps {
    pub red: Decimal,
    pub blue: Decimal,
    pub run: Decimal,
}

impl Caps {
    pub fn for_batch(n: u64) -> Caps {
        // in tenths of a cent per task of the batch
        let per = |mills: u64| Decimal::new((n * mills) as i64, 3);
        Caps {
            red: per(15),
            blue: per(200),
            run: per(52),
        }
    }
}

pub(super) fn job(tasks: &[Task], outside: &Path, caps: &Caps) -> String {
    let mut y = format!(
        "name: chaos\nconcurrency: 8\nmax_cost_usd: {}\nteams:\n  red: {{ max_cost_usd: {} }}\n  blue: {{ max_cost_usd: {}, cap: {{ usd: {}, period: day }} }}\n",
        caps.run, caps.red, caps.blue, caps.blue
    );
    y.push_str(
        "providers:\n  sim: { max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n  sim-responses: { protocol: openai-responses, simulator: true, max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n  sim-chat: { protocol: openai-chat, simulator: true, max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n",
    );
    y.push_str(
        "defaults:\n  model: claude-sonnet-4-5\n  max_tokens: 2048\n  toolset: coding\n  check: 'python3 -m unittest -q'\n  check_timeout: 30s\n  sandbox: { network: false }\n  keep_workspaces: never\n  limits: { max_turns: 12, time_limit: 90s }\ntasks:\n",
    );
    for t in tasks {
        y.push_str(&format!(
            "  - id: {}\n    prompt: Fix the failing test.\n    provider: {}\n    stream: {}\n    repo: {}\n    workspaces: {}\n    limits: {{ max_cost_usd: {}, wrap_up: {}, show_budget: {} }}\n    sim: {{ chaos: {{ seed: {}, outside: '{}', max_string: {}, misbehave_percent: {}, fault_percent: {}, max_turns: {} }} }}\n",
            t.id(),
            t.provider,
            t.stream,
            t.repo,
            t.workspaces,
            t.cap,
            t.wrap_up,
            t.wrap_up,
            t.seed,
            outside.display(),
            t.max_string,
            t.misbehave,
            t.faults,
            t.turns
        ));
        if t.window > 0 {
            y = y.replacen(
                &format!("    sim: {{ chaos: {{ seed: {},", t.seed),
                &format!(
                    "    context: {{ window: {}, keep: 2, strategy: {} }}\n    sim: {{ context_window: {}, chaos: {{ seed: {},",
                    t.window,
                    t.strategy,
                    t.sim_window,
                    t.seed,
                ),
                1,
            );
        }
        if let Some(team) = t.team {
            y.push_str(&format!("    team: {team}\n"));
        }
        if t.batch {
            y.push_str("    batch: { mode: on, window: 100ms }\n");
        }
    }
    y
}
