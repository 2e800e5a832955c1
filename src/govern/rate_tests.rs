//! The gates: pacing, refunds, pauses, learned limits and the adaptive rate.

use super::*;

fn limits(rpm: u32, burst_ms: u64) -> RateLimits {
    RateLimits {
        rpm: Some(rpm),
        itpm: None,
        otpm: None,
        burst: Duration::from_millis(burst_ms),
    }
}

#[tokio::test]
async fn paces_to_the_rate_after_the_burst() {
    // 1200 rpm = one every 50 ms (50.5 at 99%); one second's worth = 20, 2 kept in
    // reserve: 18 at once, then 12 more
    let g = Gate::new(&limits(1200, 1000));
    let start = Instant::now();
    for _ in 0..30 {
        g.admit(0, 0).await;
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(12 * 50), "{took:?}");
    assert!(took < Duration::from_millis(1000), "{took:?}");
}

#[tokio::test]
async fn token_charges_larger_than_the_burst_are_paced_not_refused() {
    let g = Gate::new(&RateLimits {
        rpm: None,
        itpm: Some(60_000),
        otpm: None,
        burst: Duration::from_secs(1),
    });
    let start = Instant::now();
    g.admit(3000, 0).await; // 990/s with a burst of 900: over two seconds
    assert!(
        start.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_wait_cut_off_gives_back_what_it_had_taken() {
    // 60,000 itpm: 990 a second, a burst of 900.
    let g = Gate::new(&RateLimits {
        rpm: None,
        itpm: Some(60_000),
        otpm: None,
        burst: Duration::from_secs(1),
    });
    // 1,800 takes the burst at once, then waits for the rest: cut it off.
    let cut = tokio::time::timeout(Duration::from_millis(100), g.admit(1800, 0)).await;
    assert!(cut.is_err());
    // The 900 it took are back: the next 900 go at once.
    let start = Instant::now();
    g.admit(850, 0).await;
    assert!(
        start.elapsed() < Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn tokens_given_back_wake_a_waiter_and_debts_hold_the_next() {
    let g = Arc::new(Gate::new(&RateLimits {
        rpm: None,
        itpm: Some(60_000),
        otpm: None,
        burst: Duration::from_secs(1),
    }));
    g.admit(900, 0).await; // the whole burst; refilling takes about 909 ms
    let start = Instant::now();
    let waiter = tokio::spawn({
        let g = g.clone();
        async move { g.admit(900, 0).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let charged = TokenCount {
        input: 900,
        output: 0,
    };
    g.correct(charged, TokenCount::default());
    waiter.await.unwrap();
    let woke = start.elapsed();
    assert!(woke < Duration::from_millis(500), "{woke:?}");
    // Counted at twice the charge: the next request waits out the debt too.
    g.correct(
        charged,
        TokenCount {
            input: 1800,
            output: 0,
        },
    );
    let start = Instant::now();
    g.admit(1, 0).await;
    assert!(
        start.elapsed() >= Duration::from_millis(800),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_pause_holds_everyone() {
    let g = Gate::new(&limits(60_000, 1000));
    g.pause_until(Instant::now() + Duration::from_millis(200));
    g.pause_until(Instant::now() + Duration::from_millis(50)); // never shortens
    let start = Instant::now();
    g.admit(0, 0).await;
    assert!(start.elapsed() >= Duration::from_millis(190));
}

fn none() -> RateLimits {
    RateLimits {
        rpm: None,
        itpm: None,
        otpm: None,
        burst: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn stated_limits_pace_where_nothing_is_configured_and_never_override_the_job() {
    let g = Gate::new(&RateLimits {
        itpm: Some(50_000),
        ..none()
    });
    let stated = StatedLimits {
        rpm: Some(1200),
        itpm: Some(400_000),
        otpm: Some(80_000),
        tpm: Some(500_000),
    };
    let change = g.learn(&stated).expect("a change");
    assert_eq!(change.before.itpm, Some(50_000));
    let now = g.pacing();
    assert_eq!(now.rpm, Some(1200));
    assert_eq!(now.itpm, Some(50_000), "the job's own limit stays");
    assert_eq!(now.otpm, Some(80_000));
    assert_eq!(
        now.tpm, None,
        "a combined limit is not learned over a configured one"
    );
    assert_eq!(
        g.learn(&stated),
        None,
        "the same limits again change nothing"
    );
    assert_eq!(g.learned().len(), 1);
    // Learned mid-window, the limiter starts drained: 20 requests at 1200 rpm (one
    // every 50.5 ms) take about a second, not a burst.
    let start = Instant::now();
    for _ in 0..20 {
        g.admit(0, 0).await;
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // A new stated limit replaces the learned one.
    let faster = StatedLimits {
        rpm: Some(60_000),
        ..stated
    };
    assert!(g.learn(&faster).is_some());
    assert_eq!(g.learned().len(), 2);
}

#[tokio::test]
async fn a_combined_token_limit_is_charged_input_and_output() {
    let g = Gate::new(&none());
    // 60,000 a minute: 990 a second; drained at the start.
    g.learn(&StatedLimits {
        tpm: Some(60_000),
        ..Default::default()
    });
    let start = Instant::now();
    g.admit(500, 490).await;
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1500),
        "{took:?}"
    );
}

#[tokio::test]
async fn without_limits_the_first_request_goes_alone_then_the_rate_starts_slow_and_429s_cut_it() {
    let g = Gate::new(&none());
    let start = Instant::now();
    g.admit(0, 0).await;
    // Until an answer comes, one request a second.
    let second = tokio::time::timeout(Duration::from_millis(500), g.admit(0, 0)).await;
    assert!(
        second.is_err(),
        "a second request waits for the first answer"
    );
    g.answered(start);
    assert_eq!(g.adaptive_rate(), Some(2.0), "slow start");
    // Answers at 20 a second for the last second (to requests sent before the rate was
    // set, so it stays), then a 429 for a request sent now.
    for _ in 0..20 {
        g.answered(start);
    }
    let sent = Instant::now();
    g.refused(sent);
    let rate = g.adaptive_rate().expect("paced");
    assert!(
        rate <= 0.8 * 2.0 + 1e-9,
        "cut below the rate it was at: {rate}"
    );
    // A 429 for a request sent before that cut is the same episode.
    g.refused(start);
    assert_eq!(g.adaptive_rate(), Some(rate));
    // One sent after it cuts again.
    g.refused(Instant::now());
    assert!(g.adaptive_rate().unwrap() < rate);
    // Limits stated later take over from the adaptive rate.
    g.learn(&StatedLimits {
        rpm: Some(6000),
        ..Default::default()
    });
    assert_eq!(g.adaptive_rate(), None);
}

/// The request waiting at the adaptive limiter goes when slow start doubles the rate,
/// rather than sitting out a gap of the rate it started waiting at (W1 lost 2 s so).
#[tokio::test]
async fn a_request_waiting_at_the_adaptive_rate_goes_when_the_rate_doubles() {
    let g = std::sync::Arc::new(Gate::new(&none()));
    g.admit(0, 0).await;
    g.answered(Instant::now());
    assert_eq!(g.adaptive_rate(), Some(2.0));
    // The new rate's first request goes at once; the next would wait half a second.
    let sent = Instant::now();
    tokio::time::timeout(Duration::from_millis(100), g.admit(0, 0))
        .await
        .expect("the first request at a new rate goes at once");
    let waiting = tokio::spawn({
        let g = g.clone();
        async move {
            g.admit(0, 0).await;
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Its answer: a round trip at 2 a second, so 4.
    let doubled = Instant::now();
    g.answered(sent);
    assert_eq!(g.adaptive_rate(), Some(4.0));
    let went = waiting.await.expect("the waiter ran");
    assert!(
        went.duration_since(doubled) < Duration::from_millis(150),
        "the waiter went {:?} after the rate doubled",
        went.duration_since(doubled)
    );
}
