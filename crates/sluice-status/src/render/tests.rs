//! The renderings' shapes: the documented keys, Prometheus lines, escaping.

use super::*;
use crate::{Board, Counters, Process, Totals};

fn view() -> View {
    let w = [Counters::default()];
    for _ in 0..990 {
        w[0].response(200);
    }
    for _ in 0..10 {
        w[0].response(404);
    }
    w[0].timings(300, 1_500_000);
    let b = Board::new(crate::slot::TopSlot::leak(1));
    b.view(Totals::sum(&w), Process::default(), 3)
}

#[test]
fn json_has_the_documented_keys() {
    let j: Value = serde_json::from_str(&json(&view())).unwrap();
    assert_eq!(j["requests_total"], 1000);
    assert_eq!(j["responses_by_status"]["404"], 10);
    assert_eq!(j["responses_by_status"]["200"], 990);
    assert!(j["connections"].is_object() && j["top_ranges"].is_array());
    assert_eq!(j["config_generation"], 3);
}

#[test]
fn prometheus_shapes() {
    let p = prometheus(&view(), false);
    assert!(p.contains("sluice_responses_total{code=\"404\"} 10\n"));
    assert!(p.contains("sluice_time_to_first_byte_seconds_bucket{le=\"0.0005\"} 1\n"));
    assert!(p.contains("sluice_transfer_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert!(!p.contains("# EOF"));
    let om = prometheus(&view(), true);
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE sluice_requests counter\n"));
}

#[test]
fn html_escapes_client_data() {
    let mut v = view();
    v.top
        .urls_by_requests
        .push(("/<script>x</script>".into(), 1));
    let h = html(&v);
    assert!(h.contains("/&lt;script&gt;x&lt;/script&gt;"));
    assert!(!h.contains("<script>x"));
}

#[test]
fn disk_lanes_show_in_every_form() {
    let mut v = view();
    v.process.disks = vec![crate::DiskLane {
        device: "259:1".into(),
        waiting: 3,
        reading: 6,
    }];
    let j: Value = serde_json::from_str(&json(&v)).unwrap();
    assert_eq!(
        j["disk_lanes"],
        serde_json::json!([{"device": "259:1", "waiting": 3, "reading": 6}])
    );
    let p = prometheus(&v, false);
    assert!(
        p.contains("sluice_disk_lane_waiting{device=\"259:1\"} 3\n"),
        "{p}"
    );
    assert!(
        p.contains("sluice_disk_lane_reading{device=\"259:1\"} 6\n"),
        "{p}"
    );
    assert!(html(&v).contains("<tr><td>259:1</td><td>3</td><td>6</td></tr>"));
}
