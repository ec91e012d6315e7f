//! TLS setup for sluice's HTTPS listeners: the `[tls]` section (sluice-config)
//! turned into one rustls [`ServerConfig`], shared by every worker.
//!
//! Owns: reading and checking certificates and keys (`file: reason` errors, so a
//! bad file on reload keeps the old configuration serving, and `sluice check`
//! says what is wrong), picking a certificate by SNI, the protocol defaults
//! (TLS 1.2 and 1.3 only, rustls's default cipher suites, ALPN `http/1.1`,
//! resumption by tickets and by session id), and the kernel-TLS probe.
//!
//! Must not: touch client sockets or drive handshakes. The worker in
//! `sluice-server` owns each connection's `rustls::ServerConnection` and moves
//! records between it and the socket from its own event loop (see
//! `sluice-server/src/tls.rs`).
//!
//! Costs: loading is start-up and reload work only. Per handshake, the resolver
//! is one hash lookup (two for a wildcard). The ticket key and the session cache
//! are process-wide and survive reloads, so a reload does not make every
//! returning client do a full handshake again.
//!
//! Crypto provider: `ring`. It builds from a fresh clone with nothing but a C
//! compiler; aws-lc-rs (rustls's default) would add a CMake/NASM build step on
//! some hosts for no feature sluice needs here.

pub use rustls;

use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use sluice_config::{KtlsMode, TlsSection};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Most TLS 1.2 sessions remembered by id (about 200 bytes each).
const SESSION_CACHE: usize = 16 * 1024;

/// A loaded `[tls]` section.
pub struct Tls {
    pub config: Arc<ServerConfig>,
    /// One line for logs and `sluice check`: the certificates and names.
    pub summary: String,
}

/// Why [`load`] failed: the config key that names what failed (`tls.cert`,
/// `tls.sni[2].key`, counted from 1 as config messages count), so the caller can
/// say where the config names it, and `file: reason`.
#[derive(Debug)]
pub struct LoadError {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Which of a pair's two files an error is about.
enum Part {
    Cert,
    Key,
}

fn at(table: &str) -> impl Fn((Part, String)) -> LoadError + '_ {
    move |(part, message)| LoadError {
        key: match part {
            Part::Cert => format!("{table}.cert"),
            Part::Key => format!("{table}.key"),
        },
        message,
    }
}

/// Load every certificate and key the section names and build the server
/// configuration. Errors are `file: reason`, with the key that names the file.
pub fn load(section: &TlsSection) -> Result<Tls, LoadError> {
    let whole = |message: String| LoadError {
        key: "tls".into(),
        message,
    };
    let (Some(cert), Some(key)) = (&section.cert, &section.key) else {
        return Err(whole("tls: cert and key are needed".into()));
    };
    let default = certified_key(cert, key).map_err(at("tls"))?;
    let mut resolver = SniResolver {
        default: Some(Arc::new(default)),
        exact: HashMap::new(),
        wildcard: HashMap::new(),
    };
    let mut names = 0;
    for (k, s) in section.sni.iter().enumerate() {
        let table = format!("tls.sni[{}]", k + 1);
        let ck = Arc::new(certified_key(&s.cert, &s.key).map_err(at(&table))?);
        for n in &s.names {
            let n = n.to_ascii_lowercase();
            let (map, k) = match n.strip_prefix("*.") {
                Some(suffix) => (&mut resolver.wildcard, suffix.to_string()),
                None => (&mut resolver.exact, n.clone()),
            };
            if map.insert(k, ck.clone()).is_some() {
                return Err(LoadError {
                    key: format!("{table}.names"),
                    message: format!("tls.sni: {n:?} is named twice"),
                });
            }
            names += 1;
        }
    }
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(provider::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| whole(format!("tls: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    // HTTP/2 is a later step: advertise only what is served. A client that offers
    // only protocols sluice does not speak gets a handshake failure, as RFC 7301
    // asks; one that offers none is served HTTP/1.1.
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.session_storage = session_cache();
    if section.tickets {
        cfg.ticketer = ticketer().map_err(whole)?;
    }
    // Secrets are extracted only for kernel TLS; rustls refuses otherwise.
    cfg.enable_secret_extraction = section.ktls == KtlsMode::Auto;
    cfg.max_early_data_size = 0;
    let summary = format!(
        "default certificate {}{}",
        cert.display(),
        if names > 0 {
            format!(
                ", {names} SNI name(s) in {} certificate(s)",
                section.sni.len()
            )
        } else {
            String::new()
        }
    );
    Ok(Tls {
        config: Arc::new(cfg),
        summary,
    })
}

/// Read a PEM chain and its key, and check that they belong together.
fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, (Part, String)> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| (Part::Cert, format!("{}: {}", cert.display(), pem_error(e))))?
        .collect::<Result<_, _>>()
        .map_err(|e| (Part::Cert, format!("{}: {}", cert.display(), pem_error(e))))?;
    if chain.is_empty() {
        return Err((
            Part::Cert,
            format!("{}: no CERTIFICATE in the file", cert.display()),
        ));
    }
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| (Part::Key, format!("{}: {}", key.display(), pem_error(e))))?;
    let signer = provider::sign::any_supported_type(&der).map_err(|e| {
        (
            Part::Key,
            format!("{}: unusable private key: {e}", key.display()),
        )
    })?;
    let ck = CertifiedKey::new(chain, signer);
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(_)) => Err((
            Part::Key,
            format!(
                "{}: this key does not belong to the certificate in {}",
                key.display(),
                cert.display()
            ),
        )),
        // The leaf's key could not be read for comparison (an unusual algorithm):
        // the handshake will tell; do not refuse what may work.
        Err(_) => Ok(ck),
    }
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::Io(e) => e.to_string(),
        E::NoItemsFound => "no PEM item of the expected kind in the file".into(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// Certificates by server name: exact names, then `*.parent` for one label, then
/// the default certificate (clients without SNI, or with an unknown name).
#[derive(Debug)]
struct SniResolver {
    default: Option<Arc<CertifiedKey>>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the parent domain of the wildcard (`example.org` for `*.example.org`).
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl SniResolver {
    fn pick(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = name {
            // rustls hands over the name already lower-cased and without a trailing dot.
            if let Some(ck) = self.exact.get(name) {
                return Some(ck.clone());
            }
            if let Some((_, parent)) = name.split_once('.') {
                if let Some(ck) = self.wildcard.get(parent) {
                    return Some(ck.clone());
                }
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// Plaintext bytes of the throwaway ticket that primes the ticketer (see [`ticketer`]).
const TICKET_PRIME: usize = 2048;

/// The process's ticket key (rotated by rustls every 6 hours), kept across
/// reloads so that tickets issued before a SIGHUP still resume.
fn ticketer() -> Result<Arc<dyn ProducesTickets>, String> {
    static T: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();
    if let Some(t) = T.get() {
        return Ok(t.clone());
    }
    let t = provider::Ticketer::new().map_err(|e| format!("tls: ticket key: {e}"))?;
    // rustls refuses to decrypt a ticket longer than the longest this ticketer has
    // encrypted. A serving process forked from the master has encrypted nothing, so
    // it would refuse every ticket another process issued until its own first full
    // handshake. One throwaway ticket, longer than any real one (a session's state is
    // a few hundred bytes), sets that bound before the fork.
    let _ = t.encrypt(&[0u8; TICKET_PRIME]);
    Ok(T.get_or_init(|| t).clone())
}

/// TLS 1.2 session-id resumption: one bounded cache for the process.
fn session_cache() -> Arc<dyn StoresServerSessions> {
    static C: OnceLock<Arc<dyn StoresServerSessions>> = OnceLock::new();
    C.get_or_init(|| rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE))
        .clone()
}

/// What the kernel-TLS probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelTls {
    /// The kernel accepted the `tls` upper-layer protocol on a TCP socket.
    Available,
    /// It did not (or `ktls = "off"`): why, for the log.
    Unavailable(String),
}

/// Does this kernel offer TLS offload? One loopback connection and one
/// `setsockopt(TCP_ULP, "tls")` on it, once per process. (The ULP can only be
/// attached to an established socket, hence the connection.)
pub fn probe_kernel_tls(mode: KtlsMode) -> KernelTls {
    if mode == KtlsMode::Off {
        return KernelTls::Unavailable("tls.ktls = \"off\"".into());
    }
    static P: OnceLock<KernelTls> = OnceLock::new();
    P.get_or_init(|| match try_ulp() {
        Ok(()) => KernelTls::Available,
        Err(e) => KernelTls::Unavailable(format!("TCP_ULP \"tls\": {e}")),
    })
    .clone()
}

fn try_ulp() -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let c = std::net::TcpStream::connect(l.local_addr()?)?;
    let _server_side = l.accept()?;
    let name = b"tls";
    // SAFETY: setsockopt on our own socket with a byte string and its length.
    let r = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_picks_exact_then_wildcard_then_default() {
        let ck = |_: u8| -> Arc<CertifiedKey> {
            // Any signer will do: the resolver compares pointers, not keys.
            let key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).unwrap();
            let s = provider::sign::any_supported_type(&key).unwrap();
            Arc::new(CertifiedKey::new(vec![CertificateDer::from(vec![1u8])], s))
        };
        let (d, a, w) = (ck(0), ck(1), ck(2));
        let r = SniResolver {
            default: Some(d.clone()),
            exact: [("a.example.org".to_string(), a.clone())].into(),
            wildcard: [("example.org".to_string(), w.clone())].into(),
        };
        let is = |got: Option<Arc<CertifiedKey>>, want: &Arc<CertifiedKey>| {
            Arc::ptr_eq(&got.unwrap(), want)
        };
        assert!(is(r.pick(Some("a.example.org")), &a));
        assert!(is(r.pick(Some("b.example.org")), &w));
        // One label only, as in certificates: x.b.example.org is not *.example.org.
        assert!(is(r.pick(Some("x.b.example.org")), &d));
        assert!(is(r.pick(Some("example.org")), &d));
        assert!(is(r.pick(None), &d));
    }

    #[test]
    fn off_is_never_probed() {
        assert!(matches!(
            probe_kernel_tls(KtlsMode::Off),
            KernelTls::Unavailable(_)
        ));
    }

    /// A throwaway P-256 key (PKCS#8), only for the resolver test.
    const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg1C46eVNRBPis70HH
bKthCpEcHNaUcBKGW/LAR6hyr8ehRANCAARUpBl8GZNw4dUyHI7arnhk67Mdzehv
H+W7RGaUFxLWxCJmpGKLXQpSwVjQq/fNWYVgMFHlQM6a0w9qrWFazWt5
-----END PRIVATE KEY-----
";
}
