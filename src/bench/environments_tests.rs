//! Unit tests of `bench environments`' pure parts: the figures, /proc's lines, the report's text.

use super::*;

#[test]
fn spread_takes_the_middle_and_the_nearest_rank_99th() {
    assert_eq!(Spread::of(&[]), None);
    let one = Spread::of(&[7]).unwrap();
    assert_eq!((one.n, one.median, one.p99), (1, 7.0, 7.0));
    let even = Spread::of(&[4, 1, 3, 2]).unwrap();
    assert_eq!((even.median, even.p99), (2.5, 4.0));
    // 1..=100 shuffled: the 99th smallest, not the largest.
    let hundred: Vec<u64> = (1..=100).rev().collect();
    let s = Spread::of(&hundred).unwrap();
    assert_eq!((s.median, s.p99), (50.5, 99.0));
    // 500 calls: the 495th.
    let calls: Vec<u64> = (1..=500).collect();
    assert_eq!(Spread::of(&calls).unwrap().p99, 495.0);
}

#[test]
fn stat_lines_with_odd_command_names_parse() {
    let p = parse_stat("4242 (conmon) S 1 4241 4241 0 -1 4194560 95 0").unwrap();
    assert_eq!(
        p,
        Proc {
            pid: 4242,
            ppid: 1,
            comm: "conmon".into()
        }
    );
    let odd = parse_stat("17 (a) b (c)) R 16 17 17 0").unwrap();
    assert_eq!((odd.pid, odd.ppid, odd.comm.as_str()), (17, 16, "a) b (c)"));
    assert_eq!(parse_stat(""), None);
    assert_eq!(parse_stat("12 (cut"), None);
}

#[test]
fn only_conmons_of_this_runner_count_with_the_processes_inside_their_container() {
    let cmd = |name: &str| {
        format!("/usr/bin/conmon\0--api-version\x001\0-c\0abc\0-n\0{name}\0-r\0/usr/bin/runc\0")
            .into_bytes()
    };
    assert!(conmon_is_ours(
        &cmd("agentbatch-t900-001-3-0123456789ab"),
        900
    ));
    assert!(!conmon_is_ours(
        &cmd("agentbatch-t901-001-3-0123456789ab"),
        900
    ));
    assert!(!conmon_is_ours(
        &cmd("agentbatch-t9000-001-3-0123456789ab"),
        900
    ));
    assert!(!conmon_is_ours(&cmd("other-t900-3"), 900));
    assert!(!conmon_is_ours(b"/usr/bin/conmon\0-n", 900));
    assert!(!conmon_is_ours(b"", 900));
    let p = |pid, ppid, comm: &str| Proc {
        pid,
        ppid,
        comm: comm.into(),
    };
    let table = vec![
        p(10, 1, "conmon"),
        p(11, 10, "sh"),
        p(12, 11, "sh"),
        p(13, 12, "sleep"),
        // Outside the container: a cleanup conmon starts as the container ends.
        p(14, 10, "podman"),
        p(15, 14, "runc"),
        p(20, 1, "conmon"),
        p(21, 20, "sh"),
        // Its first process gone: only the cleanup is left.
        p(30, 1, "conmon"),
        p(31, 30, "podman"),
        p(40, 1, "bash"),
        p(41, 40, "sh"),
    ];
    let firsts = [11, 21];
    let mut found = containers(&table, |pid| pid != 20, |pid| firsts.contains(&pid));
    for f in &mut found {
        f.inside.sort_unstable();
    }
    assert_eq!(
        found,
        vec![
            Found {
                conmon: 10,
                inside: vec![11, 12, 13]
            },
            Found {
                conmon: 30,
                inside: vec![]
            }
        ]
    );
}

#[test]
fn the_first_process_of_a_container_is_pid_1_in_its_namespace() {
    assert_eq!(
        inner_pid("Name:\tsh\nNSpid:\t7963\t1\nVmRSS:\t  1720 kB\n"),
        Some(1)
    );
    assert_eq!(inner_pid("NSpid:\t8291\t57\n"), Some(57));
    assert_eq!(inner_pid("NSpid:\t9431\n"), Some(9431));
    assert_eq!(inner_pid("Name:\tgone\n"), None);
    assert_eq!(inner_pid(""), None);
    assert_eq!(kb_field("VmRSS:\t  1720 kB\n", "VmRSS:"), 1720);
    assert_eq!(kb_field("Rss: 5 kB\nPss:  3 kB\n", "Pss:"), 3);
    assert_eq!(kb_field("", "Pss:"), 0);
}

#[test]
fn busy_ticks_leave_idle_iowait_and_steal_out() {
    let stat = "cpu  100 2 30 5000 40 6 7 900 0 0\ncpu0 50 1 15 2500 20 3 3 450 0 0\nintr 1\n";
    assert_eq!(busy_ticks(stat), Some(145));
    assert_eq!(busy_ticks("cpu  1 2 3\n"), Some(6));
    assert_eq!(busy_ticks("cpu  1 x 3\n"), None);
    assert_eq!(busy_ticks("intr 1\n"), None);
}

#[test]
fn memory_is_the_median_sample_of_those_with_the_most_containers_up() {
    let seen = |up, rss| Memory {
        up,
        conmon_rss_kb: rss,
        inside_rss_kb: 10,
        ..Memory::default()
    };
    let samples = vec![
        seen(30, 900),
        seen(50, 1000),
        seen(50, 1300),
        seen(50, 1100),
        seen(40, 5000),
        seen(50, 1200),
    ];
    let m = settle(samples, 50);
    assert_eq!(
        (m.target, m.up, m.samples, m.conmon_rss_kb, m.peak_rss_kb),
        (50, 50, 4, 1100, 1310)
    );
    let none = settle(Vec::new(), 50);
    assert_eq!((none.target, none.up, none.samples), (50, 0, 0));
}

fn report() -> EnvironmentReport {
    let run = |calls: Vec<u64>, starts: Vec<u64>, ws: &str| RunFigures {
        tasks: 100,
        completed: 100,
        wall_s: 12.34,
        cpu_s: 30.25,
        calls,
        failed_calls: 0,
        starts,
        workspaces: vec![ws.into()],
    };
    EnvironmentReport {
        image: DEFAULT_IMAGE.into(),
        engine: "podman 4.3.1".into(),
        concurrency: 10,
        container: run(vec![20, 22, 24, 90], vec![250, 260, 400], "copy"),
        host: run(vec![5, 6, 7, 8, 9], vec![], "overlay"),
        memory: Memory {
            target: 50,
            up: 50,
            samples: 8,
            peak_rss_kb: 160_000,
            conmon_rss_kb: 51_200,
            conmon_pss_kb: 10_240,
            inside: 150,
            inside_rss_kb: 102_400,
            inside_pss_kb: 20_480,
            wall_s: 30.0,
        },
        dir: PathBuf::from("/tmp/benv"),
    }
}

#[test]
fn the_report_says_how_the_overhead_is_computed_and_whether_each_goal_is_met() {
    let text = report().to_string();
    assert!(
        text.contains("3 containers: median 260 ms, p99 400 ms; goal under 300 ms median: met"),
        "{text}"
    );
    assert!(
        text.contains("in a container median 23 ms, p99 90 ms (4 calls)"),
        "{text}"
    );
    assert!(
        text.contains("on the host median 7 ms, p99 9 ms (5 calls)"),
        "{text}"
    );
    // 23 - 7 and 90 - 7.
    assert!(
        text.contains(
            "minus the host's median call: median +16 ms, p99 +83 ms; goal under 30 ms median: met"
        ),
        "{text}"
    );
    assert!(text.contains("50 conmon 50.0 MB RSS (PSS 10.0 MB) + 150 processes inside 100.0 MB RSS (PSS 20.0 MB) = 150.0 MB RSS, 3.0 MB per container (PSS 0.6 MB)"), "{text}");
    assert!(text.contains("wall: in containers 12.3 s (100/100 completed, workspaces copy, machine CPU busy 30.2 s), on the host 12.3 s (100/100 completed, workspaces overlay, machine CPU busy 30.2 s)"), "{text}");
    let mut slow = report();
    slow.container.starts = vec![500];
    slow.container.calls = vec![100];
    let text = slow.to_string();
    assert!(text.contains("goal under 300 ms median: NOT met"), "{text}");
    assert!(text.contains("goal under 30 ms median: NOT met"), "{text}");
    let mut none = report();
    none.memory.up = 0;
    assert!(
        none.to_string().contains("no conmon of the run seen"),
        "{none}"
    );
}
