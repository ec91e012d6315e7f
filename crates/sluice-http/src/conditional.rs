//! Conditional requests: `If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//! `If-Modified-Since`, `If-Range` (RFC 9110 §13).
//!
//! Validators are passed in as the strong ETag text (with quotes) and the
//! modification time in whole seconds, which is what `Last-Modified` can express.
//! The order of evaluation is RFC 9110 §13.2.2's: a failed `If-Match` or
//! `If-Unmodified-Since` is a 412 before anything else is looked at (download
//! managers send `If-Match` with `Range` so they never stitch two versions of a
//! file together).

use crate::date;

/// What preconditions say about a GET/HEAD.
#[derive(Debug, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// The request's precondition headers (each `None` when absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a str>,
    pub if_unmodified_since: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    /// The head's header lines, when `If-Match` or `If-None-Match` came in more
    /// than one line: both are lists (RFC 9110 §5.3), so their tags are read from
    /// every line. Only then: one line, the common case, is read as it is.
    pub repeated: Option<&'a [u8]>,
}

impl<'a> Conditions<'a> {
    pub fn of(h: &crate::RequestHead<'a>) -> Self {
        Conditions {
            if_match: h.if_match,
            if_unmodified_since: h.if_unmodified_since,
            if_none_match: h.if_none_match,
            if_modified_since: h.if_modified_since,
            repeated: h.lists_repeated.then_some(h.raw_headers),
        }
    }

    /// Does a tag of the list `name` (`first`, its first line's value) pass `test`?
    fn any_line(&self, name: &str, first: &str, test: impl Fn(&str) -> bool) -> bool {
        let Some(raw) = self.repeated else {
            return test(first);
        };
        // Lines together make one list, in which a `*` is no tag.
        crate::request::field_values(raw, name)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .any(|v| v.trim() != "*" && test(v))
    }
}

/// Evaluate the preconditions of a GET/HEAD against a representation that exists.
pub fn evaluate(c: &Conditions, etag: &str, mtime_secs: u64) -> Precondition {
    // Step 1/2: If-Match (strong comparison), else If-Unmodified-Since.
    if let Some(im) = c.if_match {
        if !c.any_line("if-match", im, |l| etag_list_matches_strong(l, etag)) {
            return Precondition::Failed;
        }
    } else if let Some(ius) = c.if_unmodified_since {
        // An invalid date is ignored (§13.1.4).
        if date::parse(ius).is_some_and(|t| mtime_secs > t) {
            return Precondition::Failed;
        }
    }
    // Step 3/4: If-None-Match (weak comparison), else If-Modified-Since.
    if let Some(inm) = c.if_none_match {
        return if c.any_line("if-none-match", inm, |l| etag_list_matches_weak(l, etag)) {
            Precondition::NotModified
        } else {
            Precondition::Proceed
        };
    }
    if let Some(ims) = c.if_modified_since {
        if let Some(t) = date::parse(ims) {
            if mtime_secs <= t {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// True when the `If-Range` validator still matches, i.e. the range may be honoured.
/// An entity-tag must match strongly (weak tags never do); a date must equal
/// Last-Modified exactly.
pub fn if_range_matches(if_range: &str, etag: &str, mtime_secs: u64) -> bool {
    let v = if_range.trim();
    if v.starts_with("W/") {
        return false;
    }
    if v.starts_with('"') {
        return v == etag;
    }
    date::parse(v) == Some(mtime_secs)
}

/// `*` is the whole field's value or nothing (RFC 9110 §13.1.1: `"*" /
/// #entity-tag`): in a list of tags it is no tag, and matches none, as nginx
/// reads it.
fn etag_list_matches_strong(list: &str, etag: &str) -> bool {
    list.trim() == "*"
        || list.split(',').any(|t| {
            let t = t.trim();
            !t.starts_with("W/") && !etag.starts_with("W/") && t == etag
        })
}

fn etag_list_matches_weak(list: &str, etag: &str) -> bool {
    let ours = etag.strip_prefix("W/").unwrap_or(etag);
    list.trim() == "*"
        || list.split(',').any(|t| {
            let t = t.trim();
            t.strip_prefix("W/").unwrap_or(t) == ours
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "\"1f-5-3e8\"";

    fn evaluate(inm: Option<&str>, ims: Option<&str>, etag: &str, t: u64) -> Precondition {
        let c = Conditions {
            if_none_match: inm,
            if_modified_since: ims,
            ..Default::default()
        };
        super::evaluate(&c, etag, t)
    }

    /// `evaluate` on a parsed head's conditions, `TAG` at time 784111777.
    fn of_head(lines: &str) -> Precondition {
        let req = format!("GET /f HTTP/1.1\r\nHost: a\r\n{lines}\r\n");
        match crate::parse_head(req.as_bytes(), &crate::Limits::default()) {
            Ok(crate::Parsed::Complete(h)) => super::evaluate(&Conditions::of(&h), TAG, 784111777),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lists_in_several_lines_are_one_list() {
        // RFC 9110 §5.3: If-Match and If-None-Match lines together are one list;
        // whichever line holds the tag, the answer is the same.
        let inm =
            |a: &str, b: &str| of_head(&format!("If-None-Match: {a}\r\nIf-None-Match: {b}\r\n"));
        assert_eq!(inm("\"x\"", TAG), Precondition::NotModified);
        assert_eq!(inm(TAG, "\"x\""), Precondition::NotModified);
        assert_eq!(inm("\"x\"", "\"y\", W/\"z\""), Precondition::Proceed);
        let im = |a: &str, b: &str| of_head(&format!("If-Match: {a}\r\nIf-Match: {b}\r\n"));
        assert_eq!(im(TAG, "\"x\""), Precondition::Proceed);
        assert_eq!(im("\"x\"", TAG), Precondition::Proceed);
        assert_eq!(im("\"x\"", "\"y\""), Precondition::Failed);
        // Two lines make a list of two: a `*` in it is no tag.
        assert_eq!(inm("\"x\"", "*"), Precondition::Proceed);
        assert_eq!(im("\"x\"", "*"), Precondition::Failed);
        // One line each: read as it is.
        assert_eq!(
            of_head(&format!("If-Match: \"x\"\r\nIf-None-Match: {TAG}\r\n")),
            Precondition::Failed
        );
        assert_eq!(
            of_head(&format!("If-Match: {TAG}\r\nIf-None-Match: {TAG}\r\n")),
            Precondition::NotModified
        );
    }

    #[test]
    fn if_match_and_if_unmodified_since() {
        let ev = |im, ius, inm| {
            let c = Conditions {
                if_match: im,
                if_unmodified_since: ius,
                if_none_match: inm,
                if_modified_since: None,
                repeated: None,
            };
            super::evaluate(&c, TAG, 784111777)
        };
        assert_eq!(ev(Some(TAG), None, None), Precondition::Proceed);
        assert_eq!(
            ev(Some("\"a\", \"1f-5-3e8\""), None, None),
            Precondition::Proceed
        );
        assert_eq!(ev(Some("*"), None, None), Precondition::Proceed);
        assert_eq!(ev(Some("\"other\", *"), None, None), Precondition::Failed);
        assert_eq!(ev(Some("\"other\""), None, None), Precondition::Failed);
        // Weak tags never match strongly.
        assert_eq!(ev(Some("W/\"1f-5-3e8\""), None, None), Precondition::Failed);
        let before = "Sun, 06 Nov 1994 08:49:36 GMT";
        let same = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(ev(None, Some(before), None), Precondition::Failed);
        assert_eq!(ev(None, Some(same), None), Precondition::Proceed);
        assert_eq!(ev(None, Some("garbage"), None), Precondition::Proceed);
        // If-Match present: If-Unmodified-Since is not consulted.
        assert_eq!(ev(Some(TAG), Some(before), None), Precondition::Proceed);
        // A passed If-Match still lets If-None-Match answer 304.
        assert_eq!(ev(Some(TAG), None, Some(TAG)), Precondition::NotModified);
    }

    #[test]
    fn if_none_match() {
        assert_eq!(evaluate(Some(TAG), None, TAG, 0), Precondition::NotModified);
        assert_eq!(
            evaluate(Some("\"x\", W/\"1f-5-3e8\""), None, TAG, 0),
            Precondition::NotModified
        );
        assert_eq!(evaluate(Some("*"), None, TAG, 0), Precondition::NotModified);
        assert_eq!(
            evaluate(Some(" * "), None, TAG, 0),
            Precondition::NotModified
        );
        // `*` among tags is no tag: it matches nothing (nginx reads it so too).
        assert_eq!(
            evaluate(Some("\"other\", *"), None, TAG, 0),
            Precondition::Proceed
        );
        assert_eq!(
            evaluate(Some("\"other\""), None, TAG, 0),
            Precondition::Proceed
        );
        // INM present: IMS is ignored even when it would say "not modified".
        let ims = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(
            evaluate(Some("\"other\""), Some(ims), TAG, 0),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_modified_since() {
        let ims = "Sun, 06 Nov 1994 08:49:37 GMT";
        let t = 784111777;
        assert_eq!(evaluate(None, Some(ims), TAG, t), Precondition::NotModified);
        assert_eq!(
            evaluate(None, Some(ims), TAG, t - 1),
            Precondition::NotModified
        );
        assert_eq!(evaluate(None, Some(ims), TAG, t + 1), Precondition::Proceed);
        assert_eq!(
            evaluate(None, Some("garbage"), TAG, t),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_range() {
        assert!(if_range_matches(TAG, TAG, 0));
        assert!(!if_range_matches("W/\"1f-5-3e8\"", TAG, 0));
        assert!(!if_range_matches("\"zz\"", TAG, 0));
        assert!(if_range_matches(
            "Sun, 06 Nov 1994 08:49:37 GMT",
            TAG,
            784111777
        ));
        assert!(!if_range_matches(
            "Sun, 06 Nov 1994 08:49:37 GMT",
            TAG,
            784111778
        ));
    }
}
