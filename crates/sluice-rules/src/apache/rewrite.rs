//! mod_rewrite: `RewriteEngine`, `RewriteBase`, `RewriteCond` and `RewriteRule`.
//!
//! Owns the state that runs across lines: whether the engine is on, the conditions
//! waiting for their rule, and whether one of them was skipped (lenient mode), in
//! which case the rule is skipped with it, or it would apply unconditionally. Every
//! rule it pushes is `Class::Rewrite`; one without `L` or `END` hands its rewrite on
//! (`Flags::goes_on`, run by `RuleSet::decide`), and one with `PT` hands it to
//! mod_alias's rules (`Flags::passthrough`). A flag or test
//! sluice cannot honour is refused (strict) or skips its rule with a warning
//! (lenient); it is never silently ignored. Cost: load time only.

use super::alias::redirect_status;
use super::lex::flag_list;
use super::lex::Line;
use crate::loader::{Ctx, LoadError};
use crate::model::*;
use crate::pattern::RegexPattern;
use crate::template::Template;

/// mod_rewrite's state between lines of one file.
#[derive(Default)]
pub(super) struct Rewrite {
    engine_on: bool,
    warned_engine_off: bool,
    /// `RewriteCond`s read since the last `RewriteRule`.
    conds: Vec<Cond>,
    /// One of `conds` was skipped: the rule that follows must be skipped too.
    poisoned: bool,
    /// The last rule pushed has `C`: the next one is chained to it.
    chain_open: bool,
    /// What a relative substitution is made absolute with: the file's
    /// `RewriteBase` (the last one, wherever it is, as in Apache), or `/`.
    base: String,
}

/// A `RewriteRule`'s `[flags]`, read.
#[derive(Default)]
struct RuleFlags {
    flags: Flags,
    redirect: Option<u16>,
    forbidden: bool,
    gone: bool,
    /// `C`: the next rule runs only if this one matched.
    chain: bool,
    /// `E=`, `T=`, `CO=`, `B` (default: none).
    extra: crate::effects::Extra,
}

impl RuleFlags {
    /// No flags: as in Apache, the rule hands its rewrite on (no `L`).
    fn new() -> RuleFlags {
        let mut rf = RuleFlags::default();
        rf.flags.goes_on = true;
        rf
    }
}

impl Rewrite {
    /// A file's mod_rewrite state, with its `RewriteBase` (`None`: `/`).
    pub(super) fn with_base(base: Option<String>) -> Rewrite {
        Rewrite {
            base: base.unwrap_or_else(|| "/".into()),
            ..Rewrite::default()
        }
    }

    /// `RewriteEngine on|off`.
    pub(super) fn engine(&mut self, at: &Line) -> Result<(), LoadError> {
        self.engine_on = match at.args.first().map(|s| s.to_ascii_lowercase()).as_deref() {
            Some("on") => true,
            Some("off") => false,
            _ => return Err(at.err("RewriteEngine takes on or off")),
        };
        Ok(())
    }

    /// `RewriteCond TEST-STRING PATTERN [flags]`: kept until the next rule.
    pub(super) fn cond(&mut self, at: &Line, ctx: &mut Ctx) -> Result<(), LoadError> {
        let args = at.args;
        if args.len() < 2 || args.len() > 3 {
            return Err(at.err("RewriteCond needs a test string, a pattern and optional [flags]"));
        }
        let mut nocase = false;
        let mut or_next = false;
        let mut novary = false;
        if let Some(f) = args.get(2) {
            for flag in flag_list(f).map_err(|m| at.err(m))? {
                match flag.to_ascii_lowercase().as_str() {
                    "nc" | "nocase" => nocase = true,
                    "or" | "ornext" => or_next = true,
                    // "No Vary": the header this condition reads is left out
                    // of the answer's `Vary` (`Rule::vary_names`).
                    "nv" | "novary" => novary = true,
                    other => return self.skip_cond(at, ctx, format!("RewriteCond flag [{other}]")),
                }
            }
        }
        // `RewriteCond expr "…"`: Apache's expression language, not a test
        // string; read as one it would silently never match.
        if args[0] == "expr" {
            return self.skip_cond(at, ctx, "RewriteCond expr (an ap_expr expression)".into());
        }
        let subject = Template::parse(&args[0], &|m| ctx.maps.slot(m)).map_err(|m| at.err(m))?;
        let (negate, pat) = match args[1].strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, args[1].as_str()),
        };
        let test = match pat {
            "-f" | "-F" => CondTest::IsFile,
            "-d" => CondTest::IsDir,
            // `=""` is Apache's spelling of the empty string.
            "=\"\"" => CondTest::Equals(String::new()),
            p if p.starts_with('=') => CondTest::Equals(p[1..].to_string()),
            // Lexical order, and integers as Apache reads them (`atoi`).
            p if p.starts_with(['<', '>']) => {
                let or_equal = p[1..].starts_with('=');
                let less = p.starts_with('<');
                CondTest::Lexical {
                    accept: Accept {
                        less,
                        equal: or_equal,
                        greater: !less,
                    },
                    text: p[1 + usize::from(or_equal)..].to_string(),
                }
            }
            p => match integer_test(p) {
                Some((accept, n)) => CondTest::Integer { accept, n },
                None if p.starts_with('-') && p.len() == 2 => {
                    return self.skip_cond(at, ctx, format!("RewriteCond test {p}"))
                }
                None => CondTest::Regex({
                    // A condition is never indexed: drop the hint.
                    let mut r =
                        RegexPattern::new(p.to_string(), nocase, false).map_err(|m| at.err(m))?;
                    r.hint = None;
                    r
                }),
            },
        };
        self.conds.push(Cond {
            subject,
            test,
            negate,
            nocase,
            or_next,
            novary,
        });
        Ok(())
    }

    /// A condition sluice cannot honour: refused (strict), or skipped and its rule
    /// with it (lenient).
    fn skip_cond(&mut self, at: &Line, ctx: &mut Ctx, what: String) -> Result<(), LoadError> {
        ctx.unsupported(at.file, at.lineno, what)?;
        self.poisoned = true;
        Ok(())
    }

    /// A rule sluice cannot honour: refused (strict), or skipped with its conditions
    /// (lenient).
    fn skip_rule(&mut self, at: &Line, ctx: &mut Ctx, what: String) -> Result<(), LoadError> {
        ctx.unsupported(at.file, at.lineno, what)?;
        self.conds.clear();
        self.poisoned = false;
        Ok(())
    }

    /// `RewriteRule PATTERN SUBSTITUTION [flags]`: takes the pending conditions.
    pub(super) fn rule(&mut self, at: &Line, ctx: &mut Ctx) -> Result<(), LoadError> {
        let args = at.args;
        if args.len() < 2 || args.len() > 3 {
            return Err(at.err("RewriteRule needs a pattern, a substitution and optional [flags]"));
        }
        let rf = match args.get(2) {
            Some(f) => match rule_flags(at, f, &ctx.maps)? {
                Ok(rf) => rf,
                Err(unsupported) => {
                    return self.skip_rule(at, ctx, format!("RewriteRule flag [{unsupported}]"))
                }
            },
            None => RuleFlags::new(),
        };
        if args[0].starts_with('!') {
            return self.skip_rule(at, ctx, "negated RewriteRule pattern".into());
        }
        let extra = (!rf.extra.is_empty()).then(|| Box::new(rf.extra));
        let mut flags = rf.flags;
        flags.chained = std::mem::replace(&mut self.chain_open, rf.chain);
        let strip = args[0].len() > 1
            && args[0].starts_with('^')
            && args[0].as_bytes()[1].is_ascii_alphanumeric();
        let re = RegexPattern::new(args[0].clone(), flags.nocase, strip).map_err(|m| at.err(m))?;
        let target = Template::parse(&args[1], &|m| ctx.maps.slot(m))
            .map_err(|m| at.err(m))?
            .based(&self.base);
        let action = if rf.forbidden {
            Action::Forbidden
        } else if rf.gone {
            Action::Gone
        } else if args[1] == "-" {
            Action::Pass
        } else if let Some(status) = rf.redirect {
            Action::Redirect { status, target }
        } else {
            Action::Rewrite { target }
        };
        let rule_conds = std::mem::take(&mut self.conds);
        if std::mem::take(&mut self.poisoned) {
            ctx.warn(
                at.file,
                at.lineno,
                "RewriteRule skipped: one of its conditions was skipped",
            );
            return Ok(());
        }
        if !self.engine_on {
            if !self.warned_engine_off {
                ctx.warn(at.file, at.lineno, "RewriteRule ignored: RewriteEngine is off here (Apache ignores it too; add \"RewriteEngine On\")");
                self.warned_engine_off = true;
            }
            return Ok(());
        }
        ctx.push(
            at.file,
            at.lineno,
            Class::Rewrite,
            Pattern::Regex(re),
            None,
            rule_conds,
            action,
            flags,
        );
        if let Some(r) = ctx.rules.last_mut() {
            r.extra = extra;
        }
        Ok(())
    }

    /// The end of the file: conditions with no rule after them.
    pub(super) fn finish(self, at: &std::path::Path, ctx: &mut Ctx) {
        if !self.conds.is_empty() {
            ctx.warn(
                at,
                0,
                "RewriteCond at the end of the file has no RewriteRule; ignored",
            );
        }
        if self.chain_open {
            ctx.warn(
                at,
                0,
                "the last RewriteRule has [C], but no rule follows it to chain",
            );
        }
    }
}

/// Reads `[R=301,NC,...]`. The inner `Err` names a flag sluice does not support;
/// the outer one is a malformed list or status.
fn rule_flags(
    at: &Line,
    f: &str,
    maps: &crate::request::Maps,
) -> Result<Result<RuleFlags, String>, LoadError> {
    let mut rf = RuleFlags::new();
    let template =
        |v: &str| Template::parse(v, &|m| maps.slot(m)).map_err(|m| format!("[{f}]: {m}"));
    let mut env = Vec::new();
    let mut cookies = Vec::new();
    let mut b: Option<Option<Box<[u8]>>> = None;
    let mut escape = crate::effects::BackrefEscape::default();
    for flag in flag_list(f).map_err(|m| at.err(m))? {
        let (name, val) = match flag.split_once('=') {
            Some((n, v)) => (n.to_ascii_lowercase(), Some(v)),
            None => (flag.to_ascii_lowercase(), None),
        };
        match name.as_str() {
            "l" | "last" | "end" => rf.flags.goes_on = false,
            // PT implies L, as in Apache.
            "pt" | "passthrough" => {
                rf.flags.goes_on = false;
                rf.flags.passthrough = true;
            }
            "c" | "chain" => rf.chain = true,
            "s" | "skip" => {
                rf.flags.skip = val.and_then(|v| v.parse().ok()).ok_or_else(|| {
                    at.err(format!("[{flag}]: S needs a number of rules to skip (S=1)"))
                })?
            }
            // `N`: ask the rules again from the first with what this one
            // rewrote; Apache's limit of rounds (32,000 since 2.4.8) unless given.
            "n" | "next" => {
                rf.flags.rounds = match val {
                    None => 32_000,
                    Some(v) => v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        at.err(format!(
                            "[{flag}]: N's limit is a number of rounds, 1 to 65535 (N=100)"
                        ))
                    })?,
                }
            }
            "nc" | "nocase" => rf.flags.nocase = true,
            "qsa" | "qsappend" => rf.flags.qsa = true,
            "qsd" | "qsdiscard" => rf.flags.qsd = true,
            // "Not for internal subrequests": sluice makes none, so the rule
            // applies to every request, as Apache's does to its main ones.
            "ns" | "nosubreq" => {}
            // "Discard path info": sluice never splits a path into a file and a
            // PATH_INFO after it, so none is ever appended to a rewrite; every
            // rule already does what DPI asks of Apache.
            "dpi" | "discardpath" => {}
            "ne" | "noescape" => rf.flags.noescape = true,
            "f" | "forbidden" => rf.forbidden = true,
            "g" | "gone" => rf.gone = true,
            "r" | "redirect" => {
                rf.redirect = Some(match val {
                    None => 302,
                    Some(v) => redirect_status(v).ok_or_else(|| {
                        at.err(format!(
                            "[R={v}]: not a redirect status (301, 302, 303, 307, 308)"
                        ))
                    })?,
                })
            }
            // `E=name:value`, `E=name` (empty), `E=!name` (unset): read by the
            // rules after it as `%{ENV:name}`.
            "e" | "env" => {
                let v = val.unwrap_or("");
                let (name, value) = match v.strip_prefix('!') {
                    Some(n) => (n, None),
                    None => match v.split_once(':') {
                        Some((n, t)) => (n, Some(template(t).map_err(|m| at.err(m))?)),
                        None => (v, Some(Template::literal(""))),
                    },
                };
                if name.is_empty() {
                    return Err(at.err(format!("[{flag}]: E needs a variable (E=name:value)")));
                }
                env.push((name.into(), value));
            }
            "t" | "type" => match val.filter(|v| !v.is_empty()) {
                Some(v) => rf.extra.content_type = Some(template(v).map_err(|m| at.err(m))?),
                None => {
                    return Err(at.err(format!("[{flag}]: T needs a media type (T=text/plain)")))
                }
            },
            "co" | "cookie" => {
                let v = val.unwrap_or("");
                cookies.push(crate::effects::Cookie::parse(v, template).map_err(|m| at.err(m))?);
            }
            // `B`, `B=chars`, and how it escapes: `BNP` (a space as `%20`),
            // `BCTLS` (only controls and the space).
            "b" => b = Some(val.map(|v| v.as_bytes().into())),
            "bnp" | "backrefnoplus" => escape.no_plus = true,
            "bctls" => escape.controls = true,
            other => return Ok(Err(other.to_string())),
        }
    }
    // `BNP` alone escapes nothing, as in Apache; `BCTLS` escapes without `B`.
    if b.is_some() || escape.controls {
        escape.only = b.flatten();
        rf.extra.escape = Some(escape);
    }
    rf.extra.env = env.into();
    rf.extra.cookies = cookies.into();
    Ok(Ok(rf))
}

/// `-lt5` and its kin: which orders they accept, and their number (`atoi`).
fn integer_test(p: &str) -> Option<(Accept, i32)> {
    let (op, rest) = (p.get(..3)?, &p[3..]);
    let a = |less, equal, greater| Accept {
        less,
        equal,
        greater,
    };
    let accept = match op {
        "-lt" => a(true, false, false),
        "-le" => a(true, true, false),
        "-eq" => a(false, true, false),
        "-ne" => a(true, false, true),
        "-ge" => a(false, true, true),
        "-gt" => a(false, false, true),
        _ => return None,
    };
    Some((accept, atoi(rest)))
}

/// The argument of a `RewriteBase` line: one URL path, from `/`.
fn base_arg(at: &Line) -> Result<String, LoadError> {
    match at.args {
        [b] if b.starts_with('/') => Ok(b.clone()),
        [b] => Err(at.err(format!(
            "RewriteBase {b}: the base is a URL path and starts with / (RewriteBase /pub/)"
        ))),
        _ => Err(at.err("RewriteBase takes one URL path (RewriteBase /pub/)")),
    }
}

/// The file's `RewriteBase`: the last one in it, as Apache takes it (a
/// directory's setting, not a line's), so a rule before it is based on it too.
/// Only `RewriteBase` lines are tokenized here (a file of a million rules is
/// not held as tokens); one that does not tokenize is left for the main pass to
/// refuse in its place.
pub(super) fn base_of(
    lines: &[(usize, String)],
    file: &std::path::Path,
) -> Result<Option<String>, LoadError> {
    let mut base = None;
    for (lineno, line) in lines {
        let t = line.trim();
        let first = t.split_ascii_whitespace().next().unwrap_or("");
        if !first.eq_ignore_ascii_case("RewriteBase") {
            continue;
        }
        let Ok(toks) = super::lex::tokenize(t) else {
            continue;
        };
        if let Some((d, args)) = toks.split_first() {
            let at = Line {
                file,
                lineno: *lineno,
                directive: d,
                args,
            };
            base = Some(base_arg(&at)?);
        }
    }
    Ok(base)
}
