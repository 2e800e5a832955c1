//! TLS to PostgreSQL with libpq's `sslmode` meanings, so that a URL copied from a
//! managed database's console (`?sslmode=verify-full&sslrootcert=...`) means here what
//! it means to psql:
//!
//! - `disable`: plain TCP;
//! - `allow`, `prefer` (the default): TLS when the server offers it, plain otherwise;
//! - `require`: TLS or no connection;
//! - `verify-ca`: TLS with a certificate signed by a trusted authority;
//! - `verify-full`: that, and a certificate for the host name connected to.
//!
//! As in libpq, `prefer` and `require` encrypt without checking the certificate unless a
//! root certificate is given, in which case they check it as `verify-ca` does. The
//! trusted roots are the file `sslrootcert` names, `~/.postgresql/root.crt` when it
//! exists, or the system's (`sslrootcert=system`, and the fallback when neither file is
//! there). `PGSSLMODE` and `PGSSLROOTCERT` apply when the URL does not say. Client
//! certificates (`sslcert`, `sslkey`) are not supported and are refused by name.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, String> {
        Ok(match s {
            "disable" => Mode::Disable,
            "allow" | "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            }
        })
    }

    /// What tokio-postgres is told: whether TLS is tried, and whether it is a must.
    pub fn ssl_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// Where trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The certificate authorities the system trusts.
    System,
    /// A PEM file of one or more certificates.
    File(PathBuf),
}

/// The TLS settings of one database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: Mode,
    /// Given by `sslrootcert` (or `PGSSLROOTCERT`); `None` when neither says.
    pub roots: Option<Roots>,
}

/// Takes the TLS settings out of a `postgres://` URL's query (tokio-postgres knows
/// neither `verify-*` nor `sslrootcert`), returning the URL without them; the
/// environment's `PGSSLMODE` and `PGSSLROOTCERT` fill in what the URL leaves out.
pub fn split(url: &str) -> Result<(String, Tls), String> {
    split_with(url, |k| std::env::var(k).ok())
}

fn split_with(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<(String, Tls), String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            (b, q)
        }
        _ => (url, ""),
    };
    let (mut mode, mut roots) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(v)
            .decode_utf8()
            .map_err(|_| format!("the value of {k} in the URL is not UTF-8"))?;
        match k {
            "sslmode" => mode = Some(Mode::parse(&value)?),
            "sslrootcert" => roots = Some(roots_of(&value)),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(format!(
                    "{k}: client certificates are not supported; use a password (PGPASSWORD) or a trusted network"
                ))
            }
            _ => kept.push(pair),
        }
    }
    let mode = match mode {
        Some(m) => m,
        None => match env("PGSSLMODE").filter(|s| !s.is_empty()) {
            Some(s) => Mode::parse(&s).map_err(|e| format!("PGSSLMODE: {e}"))?,
            None => Mode::Prefer,
        },
    };
    let roots = roots.or_else(|| {
        env("PGSSLROOTCERT")
            .filter(|s| !s.is_empty())
            .map(|s| roots_of(&s))
    });
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, Tls { mode, roots }))
}

fn roots_of(value: &str) -> Roots {
    if value == "system" {
        Roots::System
    } else {
        Roots::File(PathBuf::from(value))
    }
}

/// libpq's default root file, used when it exists and nothing else is named.
fn default_root_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = PathBuf::from(home).join(".postgresql/root.crt");
    path.is_file().then_some(path)
}

impl Tls {
    /// The connector for tokio-postgres: rustls with the certificate check the mode
    /// asks for.
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let named = self
            .roots
            .clone()
            .or_else(|| default_root_file().map(Roots::File));
        let check = match self.mode {
            Mode::Disable => None,
            Mode::Prefer | Mode::Require => named.map(|r| (r, false)),
            Mode::VerifyCa => Some((named.unwrap_or(Roots::System), false)),
            Mode::VerifyFull => Some((named.unwrap_or(Roots::System), true)),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            None => Arc::new(Unchecked(provider.clone())),
            Some((roots, host_too)) => {
                let store = Arc::new(load_roots(&roots)?);
                let inner = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                    .build()
                    .map_err(|e| format!("cannot check server certificates: {e}"))?;
                if host_too {
                    inner
                } else {
                    Arc::new(AnyName(inner))
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(
                    "the system has no trusted root certificates (install ca-certificates), or name the server's CA file with sslrootcert=PATH".into(),
                );
            }
        }
        Roots::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {shown}: cannot read it: {e}"))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| format!("sslrootcert {shown}: not PEM certificates: {e}"))?;
                store.add(cert).map_err(|e| {
                    format!("sslrootcert {shown}: a certificate in it is not usable: {e}")
                })?;
            }
            if store.is_empty() {
                return Err(format!("sslrootcert {shown}: holds no certificate"));
            }
        }
    }
    Ok(store)
}

/// A hint for a connection error under these settings: what to change in the URL.
pub fn hint(tls: &Tls, detail: &str) -> Option<&'static str> {
    if detail.contains("invalid peer certificate") {
        return Some(match tls.mode {
            Mode::VerifyFull if detail.contains("not valid for name") || detail.contains("NotValidForName") => {
                "the server's certificate is not for this host name: connect by a name the certificate lists, or use sslmode=verify-ca"
            }
            _ => "the server's certificate is not signed by a trusted authority: name its CA file with sslrootcert=PATH, or use sslmode=require to encrypt without checking it",
        });
    }
    if detail.contains("server does not support TLS") {
        return Some("the server does not offer TLS: turn ssl on in its postgresql.conf, or use sslmode=prefer or disable");
    }
    None
}

/// `verify-ca`: the chain is checked, the host name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a root certificate: encrypted, the certificate taken
/// as it comes (libpq's meaning), the handshake's signatures still checked.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn libpq_only_settings_leave_the_url_and_the_rest_stays() {
        let (rest, tls) = split_with(
            "postgres://u@db:5432/ab?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20dir%2Fca.pem&connect_timeout=5",
            no_env,
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u@db:5432/ab?application_name=x&connect_timeout=5"
        );
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::File("/etc/ca dir/ca.pem".into())));
        let (rest, tls) = split_with("postgres://u@db/ab?sslmode=require", no_env).unwrap();
        assert_eq!(rest, "postgres://u@db/ab");
        assert_eq!((tls.mode, tls.roots), (Mode::Require, None));
    }

    #[test]
    fn the_environment_fills_in_only_what_the_url_leaves_out() {
        let env = |k: &str| match k {
            "PGSSLMODE" => Some("verify-ca".to_string()),
            "PGSSLROOTCERT" => Some("system".to_string()),
            _ => None,
        };
        let (_, tls) = split_with("postgres://u@db/ab", env).unwrap();
        assert_eq!((tls.mode, tls.roots), (Mode::VerifyCa, Some(Roots::System)));
        let (_, tls) = split_with("postgres://u@db/ab?sslmode=disable", env).unwrap();
        assert_eq!(tls.mode, Mode::Disable);
        let (_, tls) = split_with("postgres://u@db/ab", no_env).unwrap();
        assert_eq!((tls.mode, tls.roots), (Mode::Prefer, None));
    }

    #[test]
    fn unknown_modes_and_client_certificates_are_refused_by_name() {
        let e = split_with("postgres://u@db/ab?sslmode=verify", no_env).unwrap_err();
        assert!(e.contains("sslmode=verify is not one of"), "{e}");
        let e = split_with("postgres://u@db/ab?sslcert=/c.pem", no_env).unwrap_err();
        assert!(
            e.starts_with("sslcert: client certificates are not supported"),
            "{e}"
        );
        let env = |k: &str| (k == "PGSSLMODE").then(|| "strict".to_string());
        let e = split_with("postgres://u@db/ab", env).unwrap_err();
        assert!(e.starts_with("PGSSLMODE: sslmode=strict"), "{e}");
    }

    #[test]
    fn a_missing_or_empty_root_file_is_named() {
        let tls = Tls {
            mode: Mode::VerifyFull,
            roots: Some(Roots::File("/nonexistent/ca.pem".into())),
        };
        let e = tls.connector().err().unwrap();
        assert!(
            e.starts_with("sslrootcert /nonexistent/ca.pem: cannot read it"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let tls = Tls {
            mode: Mode::VerifyCa,
            roots: Some(Roots::File(empty.clone())),
        };
        let e = tls.connector().err().unwrap();
        assert!(e.ends_with("holds no certificate"), "{e}");
    }
}
