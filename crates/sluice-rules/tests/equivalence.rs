//! The compiled index must give exactly what checking every rule in file order
//! gives. Random rule sets (native and Apache syntax, every rule kind, hosts,
//! conditions, case-insensitivity) against random requests from the same small
//! alphabet, so that most requests hit several candidates.

use proptest::prelude::*;
use sluice_rules::{Format, LoadOptions, Outcome, Request, RuleSet};

const SEGS: &[&str] = &[
    "a", "b", "ab", "A", "x.html", "y.php", "old", "new", "42", "a b",
];
const HOSTS: &[&str] = &["example.org", "Mirror.example", "other.test"];
const UAS: &[&str] = &["curl/8", "BadBot/1.0", "Mozilla/5.0"];

fn path_from(ix: &[usize]) -> String {
    let mut p = String::new();
    for &i in ix {
        p.push('/');
        p.push_str(SEGS[i % SEGS.len()]);
    }
    if p.is_empty() {
        p.push('/');
    }
    p
}

fn native_rule(kind: usize, a: &[usize], status: usize, opt: usize) -> String {
    let p = path_from(a).replace(' ', "%20");
    let action = [
        "301 /t$1",
        "302 /dest",
        "rewrite /r/$0",
        "403",
        "410",
        "308 https://h.example/z",
    ][status % 6];
    let option = [
        "",
        " nocase",
        " host=example.org",
        " qsa",
        " host=mirror.example nocase",
    ][opt % 5];
    match kind % 6 {
        0 => format!("exact {p} {action}{option}"),
        1 => format!("prefix {p} {action}{option}"),
        2 => format!("regex ^{}(/.*)?$ {action}{option}", regex_escape(&p)),
        3 => format!(
            "regex {}$ {action}{option}",
            regex_escape(&SEGS[a.first().copied().unwrap_or(0) % SEGS.len()].replace(' ', "%20"))
        ),
        4 => format!("regex ^/(a|b)/ {action}{option}"),
        _ => format!("regex .* {action}{option}"),
    }
}

fn apache_rule(kind: usize, a: &[usize], status: usize, opt: usize) -> String {
    let p = path_from(a).replace(' ', "%20");
    let code = ["301", "302", "303", "307", "308"][status % 5];
    let cond = match opt % 6 {
        0 => String::new(),
        1 => "RewriteCond %{HTTP_HOST} ^example\\.org$ [NC]\n".into(),
        2 => "RewriteCond %{HTTP_USER_AGENT} badbot [NC,OR]\nRewriteCond %{QUERY_STRING} q=1\n"
            .into(),
        3 => "RewriteCond %{QUERY_STRING} !^$\n".into(),
        4 => "RewriteCond %{REQUEST_URI} ^/(a|b)\n".into(),
        _ => "RewriteCond %{HTTP_HOST} =other.test\n".into(),
    };
    match kind % 10 {
        0 => format!("Redirect {code} {p} /to{}", status),
        1 => format!("RedirectMatch {code} ^{}(.*)$ /m$1", regex_escape(&p)),
        2 => format!("{cond}RewriteRule ^{}$ /rw [R={code},L]", regex_escape(&p)),
        3 => format!(
            "{cond}RewriteRule ^{}/?(.*) /q?x=$1 [QSA,L]",
            regex_escape(&p)
        ),
        4 => format!("{cond}RewriteRule \\.(html|php)$ - [F]"),
        5 => format!("{cond}RewriteRule ^/A /ci [NC,R=302]"),
        // Without L: the rewrite is handed to the later rules, into paths of the
        // same alphabet, so chains of several steps come up.
        // (`C` chains the next rule to it; `S=n` passes over the next n; `PT`
        // ends the loop and asks mod_alias's rules with the rewritten path.)
        7 => format!(
            "{cond}RewriteRule ^{}(/.*)?$ /{}$1{}",
            regex_escape(&p),
            SEGS[status % SEGS.len()].replace(' ', "%20"),
            ["", " [C]", " [S=1]", " [PT]"][opt % 4]
        ),
        8 => format!(
            "{cond}RewriteRule ^{} - [S={}]",
            regex_escape(&p),
            status % 3
        ),
        9 => format!("{cond}RewriteRule ^{}$ - [L]", regex_escape(&p)),
        _ => format!("Redirect gone {p}"),
    }
}

fn regex_escape(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            o.push('\\');
        }
        o.push(c);
    }
    o
}

type RuleSpec = (usize, Vec<usize>, usize, usize);

fn rules_strategy() -> impl Strategy<Value = Vec<RuleSpec>> {
    prop::collection::vec(
        (
            0usize..10,
            prop::collection::vec(0usize..10, 0..4),
            0usize..6,
            0usize..6,
        ),
        1..40,
    )
}

fn requests_strategy() -> impl Strategy<Value = Vec<(Vec<usize>, usize, usize, usize)>> {
    prop::collection::vec(
        (
            prop::collection::vec(0usize..10, 0..5),
            0usize..3,
            0usize..3,
            0usize..3,
        ),
        1..40,
    )
}

fn check(set: &RuleSet, reqs: &[(Vec<usize>, usize, usize, usize)]) -> Result<(), TestCaseError> {
    for (segs, h, u, q) in reqs {
        let path = path_from(segs).replace(' ', "%20");
        let query = [None, Some("q=1"), Some("z=2&q=1")][*q];
        let req = Request {
            path: &path,
            query,
            host: Some(HOSTS[*h]),
            user_agent: Some(UAS[*u]),
            remote_addr: None,
            root: None,
            ..Default::default()
        };
        let fast = set.lookup(&req);
        let slow = set.lookup_linear(&req);
        prop_assert_eq!(
            &fast,
            &slow,
            "path {} host {} ua {}",
            path,
            HOSTS[*h],
            UAS[*u]
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn native_sets_agree(rules in rules_strategy(), reqs in requests_strategy()) {
        let text: String = rules.iter().map(|(k, a, s, o)| native_rule(*k, a, *s, *o) + "\n").collect();
        let set = RuleSet::from_str(&text, "t.rules", Format::Native, &LoadOptions::default()).unwrap();
        check(&set, &reqs)?;
    }

    #[test]
    fn apache_sets_agree(rules in rules_strategy(), reqs in requests_strategy()) {
        let text: String = "RewriteEngine On\n".to_string()
            + &rules.iter().map(|(k, a, s, o)| apache_rule(*k, a, *s, *o) + "\n").collect::<String>();
        let set = RuleSet::from_str(&text, "t.conf", Format::Apache, &LoadOptions::default()).unwrap();
        check(&set, &reqs)?;
    }
}

/// Sanity: the generators produce rule sets that actually match things, so the
/// property above is not vacuous.
#[test]
fn generated_rules_do_match() {
    let text = "exact /a 301 /t\nprefix /old 302 /dest\nregex \\.html$ 403\n";
    let set = RuleSet::from_str(text, "t.rules", Format::Native, &LoadOptions::default()).unwrap();
    let r = |p: &str| {
        set.lookup(&Request {
            path: p,
            ..Default::default()
        })
    };
    assert_eq!(
        r("/a"),
        Outcome::Redirect {
            status: 301,
            location: "/t".into()
        }
    );
    assert_eq!(
        r("/old/x"),
        Outcome::Redirect {
            status: 302,
            location: "/dest/x".into()
        }
    );
    assert_eq!(r("/b/x.html"), Outcome::Forbidden);
    assert_eq!(r("/zzz"), Outcome::Pass);
}
