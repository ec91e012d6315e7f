//! From the command line and the config file to one validated config: [`Overrides`]
//! (the flags, which win) applied to the raw file by [`load_config`], then checked; and the process's descriptor limit
//! raised to its hard limit ([`raise_nofile_limit`]) before sizing anything on it.

use sluice_config::{Config, Valid};
use std::path::{Path, PathBuf};

/// How the command line changes the config file (flags win).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub root: Option<PathBuf>,
    pub listen: Option<String>,
    pub workers: Option<usize>,
    pub processes: Option<usize>,
    pub access_log: Option<String>,
    pub rules: Vec<PathBuf>,
    pub lenient: bool,
    pub user: Option<String>,
    pub allow_root: bool,
    pub tls_listen: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// `--from unix:PATH`: a backend of `sluice condition` (no listeners of its own).
    pub from: Option<String>,
}

/// Read the config file (if any), apply the command-line overrides, and validate
/// the result (once, with the flags in).
pub fn load_config(path: Option<&Path>, ov: &Overrides) -> Result<Valid, String> {
    let mut cfg = match path {
        Some(p) => Config::read(p).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(r) = &ov.root {
        cfg.server.root = r.clone();
    }
    if let Some(l) = &ov.listen {
        let a = sluice_config::parse_listen(l).map_err(|e| format!("--listen: {e}"))?;
        cfg.server.listen = vec![a];
    }
    if let Some(w) = ov.workers {
        cfg.server.workers = w;
    }
    if let Some(p) = ov.processes {
        cfg.server.processes = p;
    }
    if let Some(a) = &ov.access_log {
        cfg.log.access = a.clone();
    }
    cfg.rules.files.extend(ov.rules.iter().cloned());
    cfg.rules.lenient |= ov.lenient;
    if let Some(u) = &ov.user {
        cfg.server.user = Some(u.clone());
    }
    cfg.server.allow_root |= ov.allow_root;
    if let Some(l) = &ov.tls_listen {
        let a = sluice_config::parse_listen(l).map_err(|e| format!("--tls-listen: {e}"))?;
        cfg.tls.listen = vec![a];
    }
    if let Some(c) = &ov.tls_cert {
        cfg.tls.cert = Some(c.clone());
    }
    if let Some(k) = &ov.tls_key {
        cfg.tls.key = Some(k.clone());
    }
    let cfg = cfg.validate().map_err(|e| e.to_string())?;
    crate::logging::check(&cfg.log.level)
        .map_err(|e| cfg.source.error("log.level", e).to_string())?;
    Ok(cfg)
}

/// Raise the soft open-file limit to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a stack struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 1024;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                rl.rlim_cur = rl.rlim_max;
            }
        }
    }
    rl.rlim_cur
}
