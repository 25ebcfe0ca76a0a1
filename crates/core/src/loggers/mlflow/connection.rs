//! How the MLflow logger reaches its server, from the variables MLflow's own client reads:
//! `http://` or `https://` (the system's trust store, plus the CA bundle
//! `MLFLOW_TRACKING_SERVER_CERT_PATH` names; `MLFLOW_TRACKING_INSECURE_TLS=true` skips the
//! check), and `MLFLOW_TRACKING_TOKEN` (a bearer token) or `MLFLOW_TRACKING_USERNAME` and
//! `MLFLOW_TRACKING_PASSWORD` (basic authentication) on every request. Credentials go into
//! request headers only: messages show the server without them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A CA bundle (PEM) to trust besides the system's.
pub const CERT_PATH_VAR: &str = "MLFLOW_TRACKING_SERVER_CERT_PATH";
/// `true`: do not check the server's certificate.
pub const INSECURE_VAR: &str = "MLFLOW_TRACKING_INSECURE_TLS";
/// A bearer token.
pub const TOKEN_VAR: &str = "MLFLOW_TRACKING_TOKEN";
/// Basic authentication's user name.
pub const USERNAME_VAR: &str = "MLFLOW_TRACKING_USERNAME";
/// Basic authentication's password.
pub const PASSWORD_VAR: &str = "MLFLOW_TRACKING_PASSWORD";

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The server's address and what every request to it carries.
pub(super) struct Connection {
    base: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl Connection {
    /// A connection to `uri` (`http://` or `https://`), configured by `var` (the environment).
    pub(super) fn new(uri: &str, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let base = uri.trim_end_matches('/').to_owned();
        let mut agent = ureq::AgentBuilder::new().timeout(TIMEOUT);
        if base.starts_with("https://") {
            let insecure = var(INSECURE_VAR).is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let bundle = var(CERT_PATH_VAR).filter(|p| !p.is_empty());
            agent = agent.tls_config(Arc::new(tls_config(bundle.as_deref(), insecure)?));
        }
        let token = var(TOKEN_VAR).filter(|t| !t.is_empty());
        let user = var(USERNAME_VAR).filter(|u| !u.is_empty());
        let authorization = match (token, user) {
            (Some(token), _) => Some(format!("Bearer {token}")),
            (None, Some(user)) => {
                let password = var(PASSWORD_VAR).unwrap_or_default();
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {pair}"))
            }
            (None, None) => None,
        };
        Ok(Self {
            base,
            agent: agent.build(),
            authorization,
        })
    }

    /// The server as messages show it (any `user:password@` left out).
    pub(super) fn shown(&self) -> String {
        let Some((scheme, rest)) = self.base.split_once("://") else {
            return self.base.clone();
        };
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        match authority.rfind('@') {
            Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
            None => self.base.clone(),
        }
    }

    /// The URL of a REST endpoint (`runs/create`).
    pub(super) fn url(&self, endpoint: &str) -> String {
        format!("{}/api/2.0/mlflow/{endpoint}", self.base)
    }

    /// The URL of an artifact under the server's artifact proxy.
    pub(super) fn artifact_url(&self, path: &str) -> String {
        format!("{}/api/2.0/mlflow-artifacts/artifacts/{path}", self.base)
    }

    /// A request of `method` to `url`, carrying the credentials.
    pub(super) fn request(&self, method: &str, url: &str) -> ureq::Request {
        let request = self.agent.request(method, url);
        match &self.authorization {
            Some(value) => request.set("Authorization", value),
            None => request,
        }
    }
}

/// rustls' settings: the system's roots and `bundle`'s, or no check at all.
fn tls_config(bundle: Option<&str>, insecure: bool) -> anyhow::Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS settings")?;
    if insecure {
        let verifier = Arc::new(NoCheck(provider));
        return Ok((builder.dangerous())
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs().unwrap_or_default();
    roots.add_parsable_certificates(native);
    if let Some(path) = bundle {
        let certificates = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                anyhow::anyhow!("{CERT_PATH_VAR}={path}: not a readable PEM file ({e})")
            })?;
        if certificates.is_empty() {
            bail!("{CERT_PATH_VAR}={path}: holds no certificate");
        }
        let (_, refused) = roots.add_parsable_certificates(certificates);
        if refused > 0 {
            bail!("{CERT_PATH_VAR}={path}: {refused} certificate(s) cannot be used as a CA");
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Accepts any server certificate (`MLFLOW_TRACKING_INSECURE_TLS=true`, as MLflow's client
/// does); signatures are still verified against the certificate presented.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
