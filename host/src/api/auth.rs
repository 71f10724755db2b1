//! Who is calling: a verified JWT's `sub` (the user) and `tenant` claim, never a request field.
//!
//! Accepted algorithms follow from the configured keys (HS256 with a secret; RS256 or ES256 with a public
//! key), so a token cannot pick a weaker algorithm than the operator chose. `alg: none` is not even
//! parseable by `jsonwebtoken`. `exp` is required; `iss` and `aud` are required when configured.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, decode_header, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::problem::ApiError;
use super::AppState;
use crate::config::{Config, MIN_SECRET_BYTES};
use crate::graph::{TenantId, UserId};
use crate::tenancy::jwt_keys::TenantJwtKeys;

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: TenantId,
    pub user: UserId,
    /// The rate-limit policy version the request asks to run (`Strand-Pinned-Version`): test traffic for a
    /// candidate, honoured only for tenants that allow it.
    pub pinned_version: Option<i64>,
}

/// The header that pins a request to a candidate policy version.
pub const PINNED_VERSION_HEADER: &str = "strand-pinned-version";

/// Why no verifier could be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("no JWT key configured: set STRAND_JWT_HS256_SECRET or STRAND_JWT_PUBLIC_KEY_FILE (required outside the embedded SQLite default)")]
    NoKey,
    #[error("cannot read the JWT public key {path}: {source}")]
    ReadKey { path: String, source: io::Error },
    #[error("{0} holds neither an RSA nor an EC P-256 public key in PEM")]
    BadKey(String),
    #[error("cannot keep the development JWT secret in {path}: {source}")]
    DevKey { path: String, source: io::Error },
    #[error("the development JWT secret in {0} is shorter than {MIN_SECRET_BYTES} bytes; delete the file and a new one is made")]
    WeakDevKey(String),
    #[error("invalid default_tenant: {0}")]
    DefaultTenant(#[from] crate::graph::InvalidTenantId),
}

/// Checks bearer tokens against the configured keys and claims — or, for a tenant that registered its own
/// keys, against those only.
pub struct Authenticator {
    hs256: Option<DecodingKey>,
    public: Option<(Algorithm, DecodingKey)>,
    issuer: Option<String>,
    audience: Option<String>,
    default_tenant: TenantId,
    tenant_keys: Arc<TenantJwtKeys>,
}

impl Authenticator {
    pub fn from_config(config: &Config, tenant_keys: Arc<TenantJwtKeys>) -> Result<Self, AuthSetupError> {
        let public = match &config.jwt_public_key_file {
            Some(path) => Some(read_public_key(path)?),
            None => None,
        };
        let secret = match (&config.jwt_hs256_secret, &public) {
            (Some(secret), _) => Some(secret.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(hs256_secret(config)?),
        };
        Ok(Self {
            hs256: secret.map(|s| DecodingKey::from_secret(s.as_bytes())),
            public,
            issuer: config.jwt_issuer.clone(),
            audience: config.jwt_audience.clone(),
            default_tenant: config.default_tenant.parse()?,
            tenant_keys,
        })
    }

    /// Verifies `token` and returns who it speaks for. The tenant it claims decides the keys: that
    /// tenant's own (by `kid`) if it registered any, else the global configuration.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        let header = decode_header(token).map_err(|e| invalid(format!("malformed token: {e}")))?;
        let tenant = match claimed_tenant(token)? {
            Some(t) => t.parse().map_err(|e| invalid(format!("claim tenant: {e}")))?,
            None => self.default_tenant.clone(),
        };
        // Whether the tenant registered keys of its own is nobody's business but the tenant's: every token
        // whose signature is not verified gets the same answer on both paths.
        let claims = match self.tenant_keys.of(&tenant) {
            Some(own) => {
                let mut candidates = own
                    .iter()
                    .filter(|k| k.algorithm == header.alg && header.kid.as_ref().is_none_or(|kid| *kid == k.kid))
                    .peekable();
                if candidates.peek().is_none() {
                    return Err(not_verified());
                }
                let mut last = None;
                let verified = candidates.find_map(|k| {
                    let checked = check(token, header.alg, &k.key, k.issuer.as_deref(), k.audience.as_deref());
                    checked.map_err(|e| last = Some(e)).ok()
                });
                verified.ok_or_else(|| last.unwrap_or_else(not_verified))?
            }
            None => {
                let key = match (header.alg, &self.hs256, &self.public) {
                    (Algorithm::HS256, Some(key), _) => key,
                    (alg, _, Some((accepted, key))) if alg == *accepted => key,
                    _ => return Err(not_verified()),
                };
                check(token, header.alg, key, self.issuer.as_deref(), self.audience.as_deref())?
            }
        };
        let user = match claims.sub {
            Subject::Number(n) => UserId::try_from(n).map_err(|e| invalid(format!("claim sub: {e}")))?,
            Subject::Text(s) => s.parse().map_err(|e| invalid(format!("claim sub: {e}")))?,
        };
        Ok(Caller { tenant, user, pinned_version: None })
    }
}

fn invalid(detail: String) -> ApiError {
    ApiError::InvalidToken(detail)
}

/// The one answer to a token no key in force verifies — wrong key, algorithm or `kid` alike.
fn not_verified() -> ApiError {
    invalid("the token's signature is not verified by the keys in force for its tenant".to_owned())
}

/// The `tenant` claim, read before the signature is checked only to choose the keys that check it: the
/// claims are used only once those keys verified the token.
fn claimed_tenant(token: &str) -> Result<Option<String>, ApiError> {
    #[derive(Deserialize)]
    struct Claimed {
        tenant: Option<String>,
    }
    let payload = token.split('.').nth(1).ok_or_else(|| invalid("malformed token: no payload".to_owned()))?;
    let json = URL_SAFE_NO_PAD.decode(payload).map_err(|e| invalid(format!("malformed token: {e}")))?;
    let claimed: Claimed = serde_json::from_slice(&json).map_err(|e| invalid(format!("malformed token: {e}")))?;
    Ok(claimed.tenant)
}

/// Verifies `token`'s signature with `key`, its `exp`, and its `iss` and `aud` where required.
fn check(
    token: &str,
    alg: Algorithm,
    key: &DecodingKey,
    issuer: Option<&str>,
    audience: Option<&str>,
) -> Result<VerifiedClaims, ApiError> {
    let mut validation = Validation::new(alg);
    // `sub` is required by `VerifiedClaims` itself: jsonwebtoken's own check would refuse numeric subjects.
    let mut required = vec!["exp"];
    match issuer {
        Some(issuer) => {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        None => validation.iss = None,
    }
    match audience {
        Some(audience) => {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    validation.set_required_spec_claims(&required);
    // jsonwebtoken checks the signature before the claims: a claim's error is told only to a verified token.
    decode::<VerifiedClaims>(token, key, &validation).map(|data| data.claims).map_err(|e| match e.kind() {
        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => not_verified(),
        _ => invalid(format!("token rejected: {e}")),
    })
}

#[derive(Deserialize)]
struct VerifiedClaims {
    sub: Subject,
}

/// Identity providers emit `sub` as a string by the JWT spec; many internal ones emit a number. The string
/// is tried first: the common case then costs no failed attempt (an error built and dropped per request).
#[derive(Deserialize)]
#[serde(untagged)]
enum Subject {
    Text(String),
    Number(i64),
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let value = parts.headers.get(AUTHORIZATION).ok_or(ApiError::MissingToken)?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| ApiError::InvalidToken("the Authorization scheme must be Bearer".to_owned()))?;
        let pinned_version =
            parts.headers.get(PINNED_VERSION_HEADER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        Ok(Caller { pinned_version, ..state.auth.verify(token)? })
    }
}

/// Claims of a token minted for development and tests (`strand token`).
#[derive(Debug, Serialize)]
pub struct MintClaims {
    pub sub: String,
    pub tenant: String,
    pub exp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
}

/// Signs `claims` with HS256. Production tokens come from the operator's identity provider instead.
pub fn mint_hs256(secret: &str, claims: &MintClaims) -> String {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret.as_bytes()))
        .expect("HS256 signing of serialisable claims cannot fail")
}

/// The HS256 secret in force: the configured one, or on the embedded default a development secret kept in
/// `dev_key_file` (created on first use) so that `strand serve` and `strand token` agree with no setup.
pub fn hs256_secret(config: &Config) -> Result<String, AuthSetupError> {
    if let Some(secret) = &config.jwt_hs256_secret {
        return Ok(secret.clone());
    }
    if !config.is_embedded() {
        return Err(AuthSetupError::NoKey);
    }
    let path = &config.dev_key_file;
    let dev_key_error = |source| AuthSetupError::DevKey { path: path.display().to_string(), source };
    match fs::read_to_string(path) {
        Ok(secret) if secret.trim().len() < MIN_SECRET_BYTES => {
            Err(AuthSetupError::WeakDevKey(path.display().to_string()))
        }
        Ok(secret) => Ok(secret.trim().to_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| dev_key_error(io::Error::other(e.to_string())))?;
            let secret = hex::encode(bytes);
            match write_private(path, &secret) {
                Ok(()) => {
                    tracing::warn!(path = %path.display(), "no JWT key configured; created a development secret");
                    Ok(secret)
                }
                // Another `strand` process created it first: use theirs, so both agree.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    fs::read_to_string(path).map(|s| s.trim().to_owned()).map_err(dev_key_error)
                }
                Err(e) => Err(dev_key_error(e)),
            }
        }
        Err(e) => Err(dev_key_error(e)),
    }
}

/// Creates `path` holding `contents`, readable by the owner only, all at once: the contents go to a private
/// temporary file that is then linked into place, so a concurrent reader never sees a partial key, and a
/// concurrent creator gets `AlreadyExists`.
fn write_private(path: &Path, contents: &str) -> io::Result<()> {
    use std::io::Write;
    let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&temporary).and_then(|mut f| f.write_all(contents.as_bytes()));
    let linked = written.and_then(|()| fs::hard_link(&temporary, path));
    fs::remove_file(&temporary)?;
    linked
}

fn read_public_key(path: &Path) -> Result<(Algorithm, DecodingKey), AuthSetupError> {
    let pem = fs::read(path).map_err(|source| AuthSetupError::ReadKey { path: path.display().to_string(), source })?;
    if let Ok(key) = DecodingKey::from_rsa_pem(&pem) {
        return Ok((Algorithm::RS256, key));
    }
    if let Ok(key) = DecodingKey::from_ec_pem(&pem) {
        return Ok((Algorithm::ES256, key));
    }
    Err(AuthSetupError::BadKey(path.display().to_string()))
}
