use super::*;

#[test]
fn space_saving_keeps_heavy_hitters() {
    let mut s = SpaceSaving::new(8);
    for i in 0..10_000u32 {
        s.add(&format!("/noise/{i}"), 1);
        if i % 4 == 0 {
            s.add("/hot.xsl", 1);
        }
    }
    let top = s.top(1);
    assert_eq!(top[0].0, "/hot.xsl");
    assert!(top[0].1 >= 2500, "{top:?}");
    assert!(s.map.len() <= 8);
}

#[test]
fn ranges_by_open_incomplete_and_rate() {
    let mut t = Talkers::default();
    let a: IpAddr = "10.1.2.3".parse().unwrap();
    let b: IpAddr = "10.1.9.9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:2::5".parse().unwrap();
    for _ in 0..4 {
        t.answered(a, "/x", 0);
    }
    t.answered(c, "/y", 0);
    let conns = vec![(a, true), (a, false), (b, true), (c, false)];
    t.evicted(b);
    t.refused(b);
    t.rule(0, 7, "redirect", 100);
    t.rule(0, 7, "redirect", 50);
    let l = t.publish(conns.into_iter(), 2.0, |s, i| format!("site{s}:{i}"));
    let get = |r: &str| l.ranges.iter().find(|x| x.range == r).cloned().unwrap();
    assert_eq!(get("10.0.0.0/8").open, 3);
    assert_eq!(get("10.1.0.0/16").incomplete, 2);
    assert_eq!(get("10.1.2.0/24").req_rate, 2.0);
    assert_eq!(get("2001:db8::/32").open, 1);
    assert_eq!(get("2001:db8:1:2::/64").req_rate, 0.5);
    assert_eq!(
        (get("10.1.9.0/24").evicted, get("10.0.0.0/8").refused),
        (1, 1)
    );
    assert_eq!(
        l.rules[0],
        RuleRow {
            rule: "site0:7".into(),
            action: "redirect",
            matches: 2,
            bytes: 150
        }
    );
    let m = merge(&[l.clone(), l]);
    assert_eq!(m.ranges[0].range, "10.0.0.0/8");
    assert_eq!(m.ranges[0].open, 6);
    assert_eq!(m.urls_by_requests[0], ("/x".to_string(), 8));
}

#[test]
fn a_busy_worker_samples_and_its_estimates_hold() {
    let mut t = Talkers::default();
    let a: IpAddr = "10.1.2.3".parse().unwrap();
    // Quiet: every request counts, exactly.
    for _ in 0..1000 {
        t.answered(a, "/quiet", 10);
    }
    let l = t.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(l.urls_by_requests[0], ("/quiet".to_string(), 1000));
    assert_eq!(l.urls_by_bytes[0], ("/quiet".to_string(), 10_000));
    // A busy second: the next one is sampled.
    for _ in 0..SAMPLE_ABOVE + 1 {
        t.answered(a, "/busy", 0);
    }
    t.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(t.stride, SAMPLE_STRIDE);
    // Busier: the stride grows with the rate, to its bound.
    for _ in 0..SAMPLED_PER_SEC * 20 {
        t.answered(a, "/busier", 0);
    }
    t.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert!((19..=21).contains(&t.stride), "{}", t.stride);
    for _ in 0..SAMPLED_PER_SEC * 1000 {
        t.answered(a, "/busiest", 0);
    }
    t.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(t.stride, MAX_STRIDE);
    // At the largest stride, a URL asked 10,000 times among 80,000 cycling
    // ones is still found, and within 40% (a standard deviation is ~7.5%).
    let mut t4 = Talkers {
        stride: MAX_STRIDE,
        ..Default::default()
    };
    for i in 0..80_000u64 {
        t4.answered(
            a,
            ["/0", "/1", "/2", "/3", "/4", "/5", "/6", "/7"][(i % 8) as usize],
            1,
        );
    }
    let l = t4.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(l.urls_by_requests.len(), 8, "{:?}", l.urls_by_requests);
    for (path, est) in &l.urls_by_requests {
        assert!((6_000..=14_000).contains(est), "{path}: {est} of 10,000");
    }
    // Eight URLs in a fixed cycle: a sampler that took every eighth request
    // would see only one of them. Each is estimated within 10%.
    let mut t2 = Talkers {
        stride: SAMPLE_STRIDE,
        ..Default::default()
    };
    let n = 80_000u64;
    for i in 0..n {
        t2.answered(
            a,
            ["/0", "/1", "/2", "/3", "/4", "/5", "/6", "/7"][(i % 8) as usize],
            100,
        );
    }
    let l = t2.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(l.urls_by_requests.len(), 8, "{:?}", l.urls_by_requests);
    for (path, est) in &l.urls_by_requests {
        assert!(
            (9_000..=11_000).contains(est),
            "{path}: {est} of 10,000 requests"
        );
    }
    let total: u64 = l.urls_by_bytes.iter().map(|(_, b)| b).sum();
    assert!(
        (7_600_000..=8_400_000).contains(&total),
        "{total} of 8,000,000 bytes"
    );
    let r = l.ranges.iter().find(|r| r.range == "10.1.2.0/24").unwrap();
    assert!(
        (76_000.0..=84_000.0).contains(&r.req_rate),
        "{}",
        r.req_rate
    );
    // Quiet again: exact again.
    let mut t3 = Talkers::default();
    t3.answered(a, "/x", 1);
    let l = t3.publish(std::iter::empty(), 1.0, |_, _| String::new());
    assert_eq!(l.urls_by_requests[0].1, 1);
}
