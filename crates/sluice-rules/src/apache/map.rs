//! `RewriteMap name type:source`: `txt:` and `rnd:` files (read at load time, relative
//! to the rules file) and the `int:tolower|toupper` functions.
//!
//! Owns turning one map directive into a [`MapDef`] in the load context; lookups at
//! request time are `request.rs`'s. Cost: one read of the map file at load.

use super::lex::Line;
use crate::loader::{Ctx, LoadError};
use crate::request::MapDef;
use rustc_hash::FxHashMap;
use std::path::Path;

/// `RewriteMap NAME TYPE:SOURCE`.
pub(super) fn directive(at: &Line, ctx: &mut Ctx) -> Result<(), LoadError> {
    let [name, spec, ..] = at.args else {
        return Err(at.err("RewriteMap needs a name and type:source"));
    };
    let def = load_map(spec, at.file, ctx).map_err(|m| at.err(m))?;
    ctx.maps.define(name, def);
    Ok(())
}

fn load_map(spec: &str, file: &Path, ctx: &mut Ctx) -> Result<MapDef, String> {
    let (kind, src) = spec
        .split_once(':')
        .ok_or_else(|| format!("RewriteMap source {spec:?}: expected type:source"))?;
    match kind {
        "int" => match src {
            "tolower" => Ok(MapDef::ToLower),
            "toupper" => Ok(MapDef::ToUpper),
            other => Err(format!(
                "RewriteMap int:{other} is not supported (tolower, toupper)"
            )),
        },
        "txt" | "rnd" => {
            let p = Path::new(src);
            let p = if p.is_relative() {
                file.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p.to_path_buf()
            };
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("RewriteMap file {}: {e}", p.display()))?;
            ctx.inputs.note(&p, text.as_bytes());
            let mut txt: FxHashMap<String, String> = FxHashMap::default();
            let mut rnd: FxHashMap<String, Vec<String>> = FxHashMap::default();
            for line in text.lines() {
                let l = line.trim();
                if l.is_empty() || l.starts_with('#') {
                    continue;
                }
                let mut it = l.split_whitespace();
                let (Some(k), Some(v)) = (it.next(), it.next()) else {
                    continue;
                };
                // Apache's txt maps answer with the first entry for a key.
                if kind == "txt" {
                    txt.entry(k.to_string()).or_insert_with(|| v.to_string());
                } else {
                    rnd.entry(k.to_string())
                        .or_insert_with(|| v.split('|').map(str::to_string).collect());
                }
            }
            Ok(if kind == "txt" {
                MapDef::Txt(txt)
            } else {
                MapDef::Rnd(rnd)
            })
        }
        other => Err(format!(
            "RewriteMap type {other}: is not supported (txt, rnd, int)"
        )),
    }
}
