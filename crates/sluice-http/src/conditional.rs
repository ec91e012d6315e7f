//! Conditional requests: `If-None-Match`, `If-Modified-Since`, `If-Range` (RFC 9110 §13).
//!
//! Validators are passed in as the strong ETag text (with quotes) and the
//! modification time in whole seconds, which is what `Last-Modified` can express.

use crate::date;

/// What preconditions say about a GET/HEAD.
#[derive(Debug, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    NotModified,
}

/// Evaluate `If-None-Match` (which, when present, makes `If-Modified-Since` ignored).
pub fn evaluate(
    if_none_match: Option<&str>,
    if_modified_since: Option<&str>,
    etag: &str,
    mtime_secs: u64,
) -> Precondition {
    if let Some(inm) = if_none_match {
        return if etag_list_matches_weak(inm, etag) {
            Precondition::NotModified
        } else {
            Precondition::Proceed
        };
    }
    if let Some(ims) = if_modified_since {
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

fn etag_list_matches_weak(list: &str, etag: &str) -> bool {
    let ours = etag.strip_prefix("W/").unwrap_or(etag);
    list.split(',').any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == ours
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "\"1f-5-3e8\"";

    #[test]
    fn if_none_match() {
        assert_eq!(evaluate(Some(TAG), None, TAG, 0), Precondition::NotModified);
        assert_eq!(
            evaluate(Some("\"x\", W/\"1f-5-3e8\""), None, TAG, 0),
            Precondition::NotModified
        );
        assert_eq!(evaluate(Some("*"), None, TAG, 0), Precondition::NotModified);
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
